"""llmperf: the package behind "The autoregressive loop", a course on LLM inference performance."""

from .config import PRESETS, ModelConfig, get_config
from .device import describe, dtype_name, environment, pick_device, synchronize
from .generation import decode_step, generate, new_cache, prefill, stream
from .kv_cache import CacheOverflowError, KVCache
from .model import Transformer
# (timing.bench is not re-exported: `llmperf.bench` is the load generator's module, python -m llmperf.bench.)
from .weights import InsufficientMemoryError, build_model, load_smollm2

__version__ = "0.1.0"

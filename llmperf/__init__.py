"""llmperf: the package behind "The autoregressive loop", a course on LLM inference performance.

`from llmperf import generate` and friends work, but each name is
imported only when first used (PEP 562's module `__getattr__`). So the pure
modules, `llmperf.cost` and `llmperf.metrics`, and the load generator
`llmperf.bench`, a client, import without PyTorch: importing one of them runs
this file, and this file imports nothing.
"""

from __future__ import annotations

import importlib
import os

__version__ = "0.1.0"

# OpenBLAS's threads spin for 2**28 cycles (about a tenth of a second) after each product before they sleep, and
# PyTorch work started meanwhile (a prefill right after the fused model's NumPy decode steps) fights them for the
# cores. 2**18 cycles (about 0.1 ms) outlasts the gaps between the products of one step, so a step loses nothing,
# and the threads are asleep before the next PyTorch work starts.
# OpenBLAS reads this when NumPy first loads it, so it only takes effect if llmperf is imported before NumPy; a
# value already set is kept. (llmperf.fast's docstring; tests/test_fast.py checks the variable.)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "18")

# Public name -> the module that defines it.
_EXPORTS = {
    "PRESETS": "config", "ModelConfig": "config", "get_config": "config",
    "describe": "device", "dtype_name": "device", "environment": "device", "pick_device": "device",
    "synchronize": "device",
    "decode_step": "generation", "generate": "generation", "new_cache": "generation", "prefill": "generation",
    "stream": "generation",
    "CacheOverflowError": "kv_cache", "KVCache": "kv_cache",
    "Transformer": "model",
    "InsufficientMemoryError": "weights", "build_model": "weights", "load_smollm2": "weights",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Import the module that defines `name` on first use (submodules such as `llmperf.cost` load as usual)."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    try:
        return importlib.import_module(f".{name}", __name__)  # `from llmperf import cost` on a fresh import
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))

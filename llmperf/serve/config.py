"""Every setting of a server, resolved once, at the edge (the command line, or `create_app`'s caller), and passed
down: the engine, the KV pool and the banner read this and nothing else.

Names follow vLLM's engine arguments where vLLM has one:

| here | vLLM | what |
|---|---|---|
| max_num_seqs | --max-num-seqs | requests in flight at once (prefilling or decoding) |
| max_model_len | --max-model-len | most tokens, prompt and answer, of one request |
| block_size | --block-size | positions per KV block (16, as vLLM's default) |
| num_blocks | --num-gpu-blocks-override | blocks in the KV pool |
| kv_cache_memory_bytes | --kv-cache-memory-bytes | the KV pool's size in bytes, instead of blocks |
| enable_prefix_caching | --enable-prefix-caching | share the blocks of prompts' common prefixes (on, as vLLM V1) |
| prefill_chunk | (--max-num-batched-tokens is vLLM's budget) | most prompt positions prefilled per step |

The KV pool's default size: on a GPU, vLLM's share of its memory (`GPU_MEMORY_UTILIZATION`, 0.9) less what is
already allocated (the weights), but no more than `max_num_seqs` whole contexts can hold at once; elsewhere, just
that: `max_num_seqs` whole contexts, the memory a server that reserves a whole context per request would take,
so that paging is compared with reservation at the same memory. The pool must hold at least one whole context,
so that every request the server accepts can finish.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from ..device import dtype_name, prefill_chunk as device_prefill_chunk, total_memory_bytes
from ..paged_cache import bytes_per_block
from ..scheduler import blocks_for
from ..scheduler.scheduler import POLICIES

GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default share of a GPU's memory for weights, activations and KV cache


@dataclass(frozen=True)
class ServingConfig:
    """A server's settings, every one concrete (no None left to resolve further down)."""

    device: str
    dtype: str
    max_num_seqs: int
    max_model_len: int
    policy: str
    prefill_chunk: int
    block_size: int
    num_blocks: int
    kv_cache_memory_bytes: int
    enable_prefix_caching: bool
    fused: bool
    reserve_full_context: bool
    max_queue: int
    decode_products: str = "PyTorch's"  # where a decode step's products run (`FusedTransformer.products_said`)

    def banner(self) -> str:
        """The settings as the server prints them when it starts."""
        return (f"{self.policy} batching, up to {self.max_num_seqs} requests at once, {self.max_model_len} tokens "
                f"each; {'fused' if self.fused else 'plain'} model on {self.device} in {self.dtype}, its decode "
                f"products {self.decode_products}; KV pool of "
                f"{self.num_blocks} blocks of {self.block_size} positions ({self.kv_cache_memory_bytes / 2**20:.1f} "
                f"MiB{', a whole context reserved per request' if self.reserve_full_context else ''}); prefix "
                f"caching {'on' if self.enable_prefix_caching else 'off'}; at most {self.prefill_chunk} prompt "
                "positions prefilled a step")

    def as_dict(self) -> dict:
        return asdict(self)


def resolve(model, *, max_num_seqs: int = 8, max_model_len: int = 2048, policy: str = "continuous",
            prefill_chunk: int | None = None, block_size: int = 16, num_blocks: int | None = None,
            kv_cache_memory_bytes: int | None = None, enable_prefix_caching: bool = True,
            reserve_full_context: bool = False, max_queue: int = 256) -> ServingConfig:
    """The settings for serving `model` (already in the form it will be served: fused or plain), every default
    decided here from its device. Raises ValueError, naming the setting, for one out of range."""
    from ..fast import FusedTransformer

    cfg, device = model.cfg, model.device
    for name, value in (("max_num_seqs", max_num_seqs), ("block_size", block_size), ("max_queue", max_queue)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}.")
    if not 1 < max_model_len <= cfg.max_seq_len:
        raise ValueError(f"max_model_len must lie in 2..{cfg.max_seq_len} ({cfg.name}'s max_seq_len), got "
                         f"{max_model_len}.")
    if policy not in POLICIES:
        raise ValueError(f"Unknown batching policy {policy!r}; choose from {POLICIES}.")
    if prefill_chunk is not None and prefill_chunk < 1:
        raise ValueError(f"prefill_chunk must be at least 1, got {prefill_chunk}.")
    if num_blocks is not None and kv_cache_memory_bytes is not None:
        raise ValueError("Give the KV pool's size once: num_blocks or kv_cache_memory_bytes, not both.")
    per_block = bytes_per_block(cfg, block_size, model.dtype)
    whole = blocks_for(max_model_len, block_size)  # one whole context
    if kv_cache_memory_bytes is not None:
        num_blocks = kv_cache_memory_bytes // per_block
    elif num_blocks is None:
        share = None
        if device.type == "cuda":
            share = int(GPU_MEMORY_UTILIZATION * total_memory_bytes(device)) - torch.cuda.memory_allocated(device)
        num_blocks = default_num_blocks(max_num_seqs, whole, per_block, share)
    if num_blocks < whole:
        raise ValueError(f"A KV pool of {num_blocks} blocks ({num_blocks * per_block} bytes) cannot hold one "
                         f"request of max_model_len {max_model_len} tokens, which needs {whole} blocks of "
                         f"{block_size} positions ({whole * per_block} bytes). Give it more memory, or a shorter "
                         "max_model_len.")
    return ServingConfig(
        device=str(device), dtype=dtype_name(model.dtype), max_num_seqs=max_num_seqs, max_model_len=max_model_len,
        policy=policy, prefill_chunk=prefill_chunk or device_prefill_chunk(device), block_size=block_size,
        num_blocks=num_blocks, kv_cache_memory_bytes=num_blocks * per_block,
        enable_prefix_caching=enable_prefix_caching, fused=isinstance(model, FusedTransformer),
        reserve_full_context=reserve_full_context, max_queue=max_queue,
        decode_products=model.products_said() if isinstance(model, FusedTransformer) else "PyTorch's")


def default_num_blocks(max_num_seqs: int, whole: int, per_block: int, gpu_share: int | None = None) -> int:
    """The KV pool's default size in blocks: room for `max_num_seqs` whole contexts of `whole` blocks each, and on
    a GPU no more than `gpu_share` bytes (its utilisation share less what is allocated) of `per_block` each."""
    blocks = max_num_seqs * whole
    return blocks if gpu_share is None else min(blocks, max(gpu_share, 0) // per_block)


def engine(model, config: ServingConfig):
    """The engine `config` describes, serving `model`."""
    from ..engine import Engine

    return Engine(model, max_batch=config.max_num_seqs, capacity=config.max_model_len, policy=config.policy,
                  prefill_chunk=config.prefill_chunk, block_size=config.block_size, num_blocks=config.num_blocks,
                  prefix_caching=config.enable_prefix_caching, reserve=config.reserve_full_context)

"""How big each chapter's experiments are, decided by the device and nothing else.

A reader's laptop CPU and an H100 differ by a factor of a thousand in speed, so
the same sweep cannot fit both. `sizes_for(device)` returns one `Sizes` per
device type; every notebook takes its sweep lengths from it, through `setup()`,
which also picks the device and dtype, prints them and loads the model. There is no
CI-only switch: CI runs exactly what a reader runs on a CPU, and the CPU sizes
keep each chapter short enough to run in a couple of minutes on a laptop's cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from .device import describe, free_memory_bytes, pick_device
from .model import Transformer
from .tokenizer import Tokenizer
from .weights import load_smollm2


@dataclass(frozen=True)
class Sizes:
    """Sweep sizes for one device. Lengths are in tokens."""

    device: str
    repeat: int  # timed repeats per point (the median is reported)
    # Chapter 1: the dependency chain
    chain_prompt: int  # prompt length for the end-to-end sweep
    chain_new_tokens: tuple[int, ...]  # numbers of generated tokens, N
    chain_batch: int  # the "more per pass" batch size
    chain_multi_token: int  # tokens verified in one cached pass ("more than one token per pass")
    # Chapter 2: prefill
    prefill_lengths: tuple[int, ...]  # prompt lengths S of the TTFT sweep
    prefill_batch_len: int  # prompt length for the batch-1 vs batch-4 comparison
    prefill_batch_model: str  # model for that comparison: a preset name, or "smollm2-135m" (real weights)
    # Chapter 3: decode intensity
    decode_batches: tuple[int, ...]  # batch sizes of the decode-step sweep
    decode_context: int  # cached positions per sequence in that sweep
    decode_contexts: tuple[int, ...]  # context lengths of the TPOT sweep at batch 1 (longest >= 16x shortest)


def sizes_for(device=None) -> Sizes:
    """The sweep sizes for `device` (default: the one pick_device() chooses)."""
    device = pick_device(device)
    return sizes_for_type(device.type, free_memory_bytes(device) if device.type == "cuda" else None)


def sizes_for_type(device_type: str, free_memory: float | None = None) -> Sizes:
    """The sweep sizes for a device type ("cuda", "mps" or "cpu"), without needing that device.

    `free_memory` (bytes) matters on CUDA only: it picks the model of the batched-prefill comparison.
    The unit tests use this to check the GPU sizes, and the sentences written from them, on a CPU.
    """
    if device_type == "cuda":
        # Llama-3-8B in bf16 needs ~16 GB; batching its prefill shows a saturated GPU.
        big = "llama-3-8b" if free_memory is not None and free_memory > 40e9 else "smollm2-1.7b"
        return Sizes("cuda", repeat=5, chain_prompt=128, chain_new_tokens=(32, 64, 128, 192, 256), chain_batch=8,
                     # SmolLM2's prefill is bound by kernel launches below ~1k tokens on a GPU: start there.
                     chain_multi_token=4, prefill_lengths=(1024, 2048, 3072, 4096, 6144, 8192),
                     prefill_batch_len=2048, prefill_batch_model=big,
                     decode_batches=(1, 2, 4, 8, 16, 32, 64, 128, 256), decode_context=512,
                     decode_contexts=(256, 512, 1024, 2048, 4096, 8191))  # 8191 + the new token = SmolLM2's max
    if device_type == "mps":
        return Sizes("mps", repeat=3, chain_prompt=64, chain_new_tokens=(16, 32, 64, 96, 128), chain_batch=8,
                     chain_multi_token=4, prefill_lengths=(128, 256, 512, 1024, 2048, 3072, 4096),
                     prefill_batch_len=1024, prefill_batch_model="smollm2-135m",
                     decode_batches=(1, 2, 4, 8, 16, 32, 64, 128), decode_context=256,
                     decode_contexts=(128, 256, 512, 1024, 2048, 4096))
    return Sizes("cpu", repeat=3, chain_prompt=32, chain_new_tokens=(8, 16, 32, 48, 64), chain_batch=8,
                 chain_multi_token=4, prefill_lengths=(64, 128, 256, 512, 1024, 1536),
                 prefill_batch_len=512, prefill_batch_model="smollm2-135m",
                 decode_batches=(1, 2, 4, 8, 16, 32, 64), decode_context=128,
                 decode_contexts=(128, 256, 512, 1024, 2048, 4096))


def default_dtype(device) -> torch.dtype:
    """The dtype chapters measure in: bfloat16 on a GPU (what serving uses), float32 on a CPU."""
    return torch.bfloat16 if pick_device(device).type in ("cuda", "mps") else torch.float32


class Setup(NamedTuple):
    """What a chapter works with: the device, the dtype it measures in, its sweep sizes, SmolLM2 and its tokenizer."""

    device: torch.device
    dtype: torch.dtype
    sizes: Sizes
    model: Transformer
    tokenizer: Tokenizer


def setup(device=None) -> Setup:
    """A chapter's first cell in one call: pick the device and dtype, load SmolLM2, choose PyTorch's thread
    count on a CPU (`fastest_thread_count`), and print the environment.

        device, dtype, sizes, model, tokenizer = setup()
    """
    device = pick_device(device)
    dtype = default_dtype(device)
    model, tokenizer = load_smollm2(device, dtype)
    if device.type == "cpu":
        threads, cores = fastest_thread_count(model), torch.get_num_threads()
        torch.set_num_threads(threads)
        if threads < cores:
            print(f"PyTorch will use {threads} thread, not {cores}: with {cores} a decode step ran slower just now, "
                  "which happens when other programs keep some cores busy (see the setup page).\n")
    print(describe(device, dtype))
    return Setup(device, dtype, sizes_for(device), model, tokenizer)


def fastest_thread_count(model, repeat: int = 3) -> int:
    """The thread count, all of PyTorch's or one, that runs one decode step of `model` faster right now.

    PyTorch splits each op over its threads and waits for the slowest. When
    another program keeps one core busy, the thread that shares that core is
    descheduled for whole time slices, and every op of a step waits for it: on
    two cores with one busy, a decode step ran several times slower on two
    threads than on one. Timing both (the best of `repeat` runs each, a fraction
    of a second) avoids that without guessing at the machine's load.
    """
    from .profile import bench_forward  # here: profile imports generation, which experiments need not load

    before = torch.get_num_threads()
    times = {}
    try:
        for threads in sorted({before, 1}, reverse=True):
            torch.set_num_threads(threads)
            times[threads] = bench_forward(model, context=32, warmup=1, repeat=repeat).min
    finally:
        torch.set_num_threads(before)
    return min(times, key=times.get)

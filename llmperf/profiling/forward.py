"""One forward pass at a chosen size, as a function to run again and again: to time it, profile it, count
its FLOPs.

`forward_fn` builds the pass once (a KV cache, random token ids, the positions)
through `llmperf.generation`'s prefill and decode_step, and returns a function
that runs it; `time_forward` times it with `llmperf.timing`'s clock;
`count_flops` counts the FLOPs of whatever runs inside it, with
torch.utils.flop_counter.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from ..generation import decode_step, new_cache, prefill
from ..timing import Timing, time_calls


def forward_fn(model, batch: int = 1, new_tokens: int = 1, context: int = 0, all_logits: bool = False,
               static: bool = False) -> Callable[[], torch.Tensor]:
    """A function that runs one cached forward pass of `new_tokens` tokens per sequence after `context` cached ones.

    new_tokens=1 is a decode step at position `context`; context=0 is a prefill of
    `new_tokens` tokens (logits for the last position only, unless `all_logits`).
    The cache is allocated once, here, and not filled: its values do not change
    the time, only how many positions attention reads does. Token ids are random.
    Each call overwrites the same cache positions, so the function can be run
    again and again. `static=True` uses a static cache (see KVCache), the form a
    CUDA Graph replays.
    """
    if batch < 1 or new_tokens < 1 or context < 0:
        raise ValueError(f"Need batch >= 1, new_tokens >= 1 and context >= 0; got {batch}, {new_tokens}, {context}.")
    cache = new_cache(model, batch, context + new_tokens, static=static)
    tokens = torch.randint(0, model.cfg.vocab_size, (batch, new_tokens), device=model.device)
    pos = torch.tensor([context], device=model.device)  # a tensor allocated once: a CUDA Graph can replay it

    @torch.inference_mode()
    def run() -> torch.Tensor:
        if new_tokens == 1:
            return decode_step(model, tokens, pos, cache)
        return prefill(model, tokens, cache, start=context, all_logits=all_logits)

    run.cache = cache  # for callers that must tell a compiler the cache's buffers stay put (compiled_step)
    return run


def time_forward(model, batch: int = 1, new_tokens: int = 1, context: int = 0, all_logits: bool = False,
                  warmup: int = 2, repeat: int = 10, static: bool = False) -> Timing:
    """Time the pass `forward_fn` builds (same arguments): `repeat` runs after `warmup` untimed ones."""
    step = forward_fn(model, batch, new_tokens, context, all_logits, static)
    return time_calls(step, warmup=warmup, repeat=repeat, device=model.device)


@contextmanager
def count_flops():
    """Count the FLOPs of every PyTorch op run inside the block; yields the FlopCounterMode.

        with count_flops() as counter:
            model(tokens)
        counter.get_total_flops()

    Attention runs in PyTorch's "math" form inside the block: on a CPU the counter
    sees the fused attention kernel as 0 FLOPs, while the math form's two matrix
    products (scores and weighted sum) it counts. The math form computes the whole
    score matrix and masks it, so a causal prefill is counted as full attention.
    (On CUDA the counter does have formulas for the fused kernels, and they count
    the full square too, whatever `is_causal` says.) Runs under inference_mode. Only what goes through PyTorch is counted: a fused
    model's NumPy products (llmperf.fast) are not.
    """
    with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        yield counter

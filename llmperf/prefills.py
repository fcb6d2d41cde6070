"""Newcomers' prefills, as a serving loop (`llmperf.engine`) schedules them: which prompts are prefilled together
in one pass, and how much of them one step runs before it decodes (chunked prefill).

A prefill pass over several prompts padded at the end to the longest reads the weights once for all of them,
but pads the shorter ones: `prefill_groups` lets a group grow while its padding stays small. Every sequence
already decoding waits for a step's prefills, so a step runs at most `PREFILL_CHUNK` positions of them
(`prefill_piece`; how many by default depends on the device: `default_chunk`): a group whole, or a prompt too
long for one step in pieces, one a step, with a decode step between them. `prefill_steps` counts the steps a
burst of newcomers takes, for a chapter to say so. The scheduler (`llmperf.scheduler`) plans with these.
Pure arithmetic: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence

PREFILL_CHUNK = 512
"""The most positions (rows × the longest prompt, padding included) one step prefills before it decodes, by
default on a CPU: as llama.cpp's micro-batch (its n_ubatch, 512). A newcomer's prefill holds up every sequence
already in the batch, so a prompt longer than this is prefilled in pieces, one a step (chunked prefill). A GPU
runs more positions in the time a CPU runs these: `default_chunk`."""
GPU_CHUNK, LARGE_GPU_CHUNK, LARGE_GPU_BYTES = 2048, 8192, 70 * 2**30
"""vLLM's token budget per step (max_num_batched_tokens) for its OpenAI-compatible server: 2,048 on a GPU, 8,192
on one of 70 GiB or more other than an A100 (larger budgets cut an A100's throughput, its code notes)."""
PADDING = 1.25  # the most positions a pass of newcomers holds per prompt token: padding short prompts wastes work


def default_chunk(device_type: str, memory_bytes: int = 0, name: str = "") -> int:
    """The positions a step prefills by default on a device of this type ("cpu", "cuda", "mps"), memory and name:
    `PREFILL_CHUNK` on a CPU (llama.cpp's), vLLM's server budget on a GPU (`GPU_CHUNK`; `LARGE_GPU_CHUNK` on a
    CUDA GPU of `LARGE_GPU_BYTES` or more, not an A100)."""
    if device_type == "cpu":
        return PREFILL_CHUNK
    large = device_type == "cuda" and memory_bytes >= LARGE_GPU_BYTES and "a100" not in name.lower()
    return LARGE_GPU_CHUNK if large else GPU_CHUNK


def prefill_groups(lengths: Sequence[int], positions: int = PREFILL_CHUNK) -> list[list[int]]:
    """Newcomers' prompts (their `lengths`, in order of arrival) split into runs prefilled together, as lists of
    their indices: a run grows while it stays within `positions` positions and PADDING times its prompts'
    tokens. A prompt too long for company is prefilled alone (in pieces, if longer than `positions`)."""
    groups: list[list[int]] = []
    for j, n in enumerate(lengths):
        if groups:
            joined = groups[-1] + [j]
            padded = len(joined) * max(lengths[i] for i in joined)
            if padded <= positions and padded <= PADDING * sum(lengths[i] for i in joined):
                groups[-1] = joined
                continue
        groups.append([j])
    return groups


def prefill_piece(rows: int, remaining: int, left: int) -> int:
    """How many more tokens of each of `rows` prompts (padded to `remaining` tokens still to go) a step with
    `left` positions to spare prefills: all of them if they fit; one prompt alone as many as fit (a piece of
    it); else none, and the group waits whole for the next step."""
    if rows * remaining <= left:
        return remaining
    return max(left, 0) if rows == 1 else 0


def prefill_steps(lengths: Sequence[int], positions: int = PREFILL_CHUNK) -> int:
    """The steps an engine of `prefill_chunk` = `positions` takes to prefill newcomers of these prompt lengths,
    arriving together: their `prefill_groups`, in order, as many positions a step as fit (`prefill_piece`)."""
    queue = [[len(group), max(lengths[i] for i in group)] for group in prefill_groups(lengths, positions)]
    steps = 0
    while queue:
        steps, left = steps + 1, positions
        while queue and (n := prefill_piece(queue[0][0], queue[0][1], left)):
            left -= queue[0][0] * n
            queue[0][1] -= n
            if queue[0][1] == 0:
                queue.pop(0)
    return steps

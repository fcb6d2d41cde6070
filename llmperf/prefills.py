"""Newcomers' prefills, as a serving loop (`llmperf.engine`) schedules them: which prompts are prefilled together
in one pass, and how much of them one step runs before it decodes (chunked prefill).

A prefill pass over several prompts padded at the end to the longest reads the weights once for all of them,
but pads the shorter ones: `prefill_groups` lets a group grow while its padding stays small. Every sequence
already decoding waits for a step's prefills, so a step runs at most `PREFILL_CHUNK` positions of them
(`prefill_piece`): a group whole, or a prompt too long for one step in pieces, one a step, with a decode step
between them. `prefill_steps` counts the steps a burst of newcomers takes, for a chapter to say so; `drop` takes
cancelled requests out of the queue.
Pure arithmetic: no torch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .kv_cache import KVCache
    from .request import Request

PREFILL_CHUNK = 512
"""The most positions (rows × the longest prompt, padding included) one step prefills before it decodes, by
default: as llama.cpp's micro-batch (its n_ubatch, 512) and vLLM's token budget per step (max_num_batched_tokens).
A newcomer's prefill holds up every sequence already in the batch, so a prompt longer than this is prefilled in
pieces, one a step (chunked prefill)."""
PADDING = 1.25  # the most positions a pass of newcomers holds per prompt token: padding short prompts wastes work


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


@dataclass(eq=False)  # queued prefills are told apart by identity
class Prefill:
    """Newcomers prefilled together, not yet in a slot: one request, or a group padded at the end to its longest
    prompt; the cache their pieces fill (made at the first), and how many positions of it are done."""

    requests: list["Request"]
    cache: "KVCache | None" = None
    done: int = 0

    @property
    def longest(self) -> int:
        return max(len(r.prompt) for r in self.requests)


def drop(queue: deque[Prefill], ids: set[int]) -> list["Request"]:
    """Take the requests whose ids are in `ids` out of the queued prefills, and return them. An entry that loses a
    request starts afresh (only a group not yet begun can keep others: a group's one pass runs whole), and one
    left empty leaves the queue."""
    dropped = []
    for p in list(queue):
        gone = [r for r in p.requests if r.id in ids]
        if gone:
            dropped += gone
            p.requests, p.cache, p.done = [r for r in p.requests if r.id not in ids], None, 0
            if not p.requests:
                queue.remove(p)
    return dropped

"""The arithmetic of where a KV budget goes, before anything runs: a burst of requests (`Workload`), how many of
them one budget holds at once, reserved or paged, the share of each request's memory its keys and values fill, and
(`dry_run`) the schedule the engine will follow, counted by stepping the scheduler on the lengths alone.

A schedule depends only on lengths when no answer ends early (no stop token), so `dry_run`'s preemptions,
recomputed positions and most in flight are what the engine with the model must count exactly. Pure Python: no
torch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...request import Request
from ...scheduler import Scheduler, blocks_for

if TYPE_CHECKING:  # the sizes only: this module imports no torch
    from ..setup import Sizes

BLOCK_SIZE = 16  # positions per KV block, vLLM's default
RESERVATIONS = 4.5  # the budget in whole contexts: 4 reservations fit, and half of one is left that none can use
OVERCOMMIT = 4  # the overcommitted run's budget is the others' ÷ this: just over one whole context
CONTEXT_SPAN = 8  # a request's context (what a reservation holds), in multiples of the mean prompt + mean answer


@dataclass(frozen=True)
class Workload:
    """A burst of requests, all sent at once: `prompts` (token ids) and the tokens each asks for (`answers`,
    never ended early), each allowed a `context` of positions; memory lent in blocks of `block_size` positions."""

    prompts: tuple[tuple[int, ...], ...]
    answers: tuple[int, ...]
    context: int
    block_size: int = BLOCK_SIZE

    @property
    def n(self) -> int:
        return len(self.prompts)

    @property
    def lengths(self) -> list[int]:
        """Each request's prompt + answer, in positions."""
        return [len(p) + a for p, a in zip(self.prompts, self.answers)]

    @property
    def reservation(self) -> int:
        """Blocks of one whole-context reservation."""
        return blocks_for(self.context, self.block_size)

    @property
    def budget(self) -> int:
        """The KV pool, in blocks: RESERVATIONS whole contexts."""
        return int(RESERVATIONS * self.reservation)

    @property
    def largest(self) -> int:
        """Blocks of the largest request at its end."""
        return max(blocks_for(n, self.block_size) for n in self.lengths)

    @property
    def max_num_seqs(self) -> int:
        """The most requests in flight that the budget holds even when every one is at its largest."""
        return self.budget // self.largest

    def at_once(self, reserve: bool) -> int:
        """Predicted: the most requests in flight at once (reserved: as many reservations as the budget holds)."""
        return min(self.n, self.budget // self.reservation if reserve else self.max_num_seqs)

    def use(self, reserve: bool) -> float:
        """Predicted: of the memory a request holds at its end (its reservation, or its blocks), the share its
        positions fill, averaged over the requests. The rest is waste inside the request's memory."""
        held = [self.context if reserve else blocks_for(n, self.block_size) * self.block_size for n in self.lengths]
        return sum(n / h for n, h in zip(self.lengths, held)) / self.n


def workload(sizes: Sizes, vocab_size: int, seed: int = 0) -> Workload:
    """Half the device's served-run count of requests (`Sizes.serve_requests`), with prompts of random ids of
    half to twice `serve_prompt` tokens and answers of 2 to twice `serve_new_tokens`, each allowed a context of
    CONTEXT_SPAN × (prompt + answer), both at their mean."""
    p, t, rng = sizes.serve_prompt, sizes.serve_new_tokens, random.Random(seed)
    n = sizes.serve_requests // 2
    prompts = tuple(tuple(rng.randrange(1000, vocab_size) for _ in range(rng.randint(p // 2, 2 * p)))
                    for _ in range(n))
    answers = tuple(rng.randint(2, 2 * t) for _ in range(n))
    return Workload(prompts, answers, CONTEXT_SPAN * (p + t))


def _stand_in(request: Request) -> None:
    request.tokens.append(0)
    if len(request.tokens) == request.max_tokens:
        request.finish_reason = "length"


def dry_run(work: Workload, budget: int, max_num_seqs: int, reserve: bool, chunk: int) -> tuple[int, int, int]:
    """(preemptions, recomputed positions, most in flight after a step): the scheduler stepped as the engine
    steps it, on the workload's lengths alone, every token a stand-in."""
    s = Scheduler(budget, work.block_size, max_num_seqs, chunk, prefix_caching=False,
                  reserve=work.context if reserve else None)
    for prompt, answer in zip(work.prompts, work.answers):
        s.add(Request(prompt, answer))
    most = 0
    while not s.idle:
        plan = s.schedule()
        for p in plan.prefills:
            for seq in p.seqs if p.samples else ():
                _stand_in(seq.request)
        plan.decodes = s.decodable(plan)
        for seq in plan.decodes:
            _stand_in(seq.request)
        s.update(plan)
        most = max(most, s.active)
    return s.preemptions, s.recomputed, most

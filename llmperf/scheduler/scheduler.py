"""Which requests run in the next step, and which positions of them: the serving loop's decisions, without a model.

A step's plan (`Plan`) has two parts:

1. decodes: every running sequence gets one more token, at its next position (run last, so that a newcomer
   whose prefill ends in this step decodes in it too);
2. prefills: passes over newcomers' prompts, in order, at most `prefill_chunk` positions a step (rows × the longest
   piece, padding included: `llmperf.prefills`), so that a long prompt is prefilled in pieces with the batch
   decoding between them (chunked prefill). A pass that reaches the end of its prompts gives each its next token.

Memory is lent in blocks (`BlockManager`). A newcomer is admitted, oldest first, while there are fewer than
`max_num_seqs` in flight and the pool has the blocks its prompt needs (less the blocks it finds in the prefix
cache, whose prefill it skips). A running sequence takes one more block each time it crosses a block's end. When
none is free, the newest sequence in flight is preempted (vLLM's recompute preemption): it gives its blocks back
and returns to the head of the queue, to be prefilled again, prompt and answer so far, when blocks are free; its
client sees only a delay. The oldest is never preempted for a newer one, so every request ends.

With `reserve` (a number of positions), each request is instead given that many positions' blocks when it is
admitted, whatever it will use: one full-context reservation per request, as servers did before paging.

Policies: "continuous" admits at every step (iteration-level scheduling, Orca and vLLM); "static" admits only when
nothing is in flight, so a batch runs until its last request ends.

Counted: `preemptions`, `recomputed` (positions prefilled again after a preemption, less those found cached), and
the block manager's prefix-cache `queries` and `hits`, in tokens. Pure Python: no torch.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from ..prefills import prefill_groups, prefill_piece
from ..request import Request
from .blocks import BlockManager, blocks_for

POLICIES = ("continuous", "static")


@dataclass(eq=False)
class Sequence:
    """A request as the scheduler tracks it: its tokens (the prompt, then those generated) and how many of their
    positions have their keys and values in its blocks (`computed`)."""

    request: Request
    computed: int = 0

    @property
    def id(self) -> int:
        return self.request.id

    @property
    def preemptions(self) -> int:
        return self.request.preemptions

    @property
    def tokens(self) -> list[int]:
        return [*self.request.prompt, *self.request.tokens]

    @property
    def num_tokens(self) -> int:
        return len(self.request.prompt) + len(self.request.tokens)


@dataclass(eq=False)
class Group:
    """Newcomers prefilled together from the same position `start` (padded at the end to the longest), and how
    many positions of them are done. Only a group of one is run in pieces; a larger one runs whole."""

    seqs: list[Sequence]
    start: int
    done: int = 0

    @property
    def longest(self) -> int:
        return max(s.num_tokens for s in self.seqs) - self.start


@dataclass
class Pass:
    """One prefill pass: positions start..start+n-1 of each sequence in `seqs` (each up to its own last token; the
    rest is padding). `samples`: the pass ends its prompts, so each row's logits give its next token."""

    seqs: list[Sequence]
    start: int
    n: int
    samples: bool


@dataclass
class Plan:
    """What one step runs: prefill passes in order, then one decode pass over `decodes`; and what the step ended
    before running anything (cancelled requests) or sent back to the queue (preempted ones)."""

    prefills: list[Pass] = field(default_factory=list)
    decodes: list[Sequence] = field(default_factory=list)
    cancelled: list[Request] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    admitted: int = 0  # newcomers admitted this step

    @property
    def empty(self) -> bool:
        return not (self.prefills or self.decodes)


class Scheduler:
    """Queues, admission under a budget of blocks, the chunked-prefill plan, cancellation and preemption.

    `add` and `cancel` may be called from any thread; `schedule`, `finish` and `update` from the one that steps.
    """

    def __init__(self, num_blocks: int, block_size: int = 16, max_num_seqs: int = 8, prefill_chunk: int = 512,
                 policy: str = "continuous", prefix_caching: bool = True, reserve: int | None = None):
        if policy not in POLICIES:
            raise ValueError(f"Unknown batching policy {policy!r}; choose from {POLICIES}.")
        if max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be at least 1, got {max_num_seqs}.")
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk (positions prefilled per step) must be at least 1, got {prefill_chunk}.")
        self.blocks = BlockManager(num_blocks, block_size, prefix_caching)
        self.max_num_seqs, self.prefill_chunk, self.policy, self.reserve = max_num_seqs, prefill_chunk, policy, reserve
        self.waiting: deque[Sequence] = deque()
        self.prefilling: deque[Group] = deque()
        self.running: list[Sequence] = []  # decoding, in order of admission
        self.order: list[Sequence] = []  # every sequence in flight (prefilling or decoding), in order of admission
        self._cancelled: set[int] = set()
        self._lock = threading.Lock()
        self.preemptions = self.recomputed = 0

    # --- any thread --------------------------------------------------------------------------

    def add(self, request: Request) -> None:
        with self._lock:
            self.waiting.append(Sequence(request))

    def cancel(self, request_id: int) -> None:
        with self._lock:
            self._cancelled.add(request_id)

    @property
    def active(self) -> int:
        """Requests in flight: prefilling or decoding."""
        return len(self.order)

    @property
    def idle(self) -> bool:
        return not self.order and not self.waiting

    # --- the stepping thread -----------------------------------------------------------------

    def schedule(self) -> Plan:
        """Decide the next step: drop the cancelled, give each running sequence a block for its next position
        (preempting the newest when none is free), admit newcomers, and plan prefill passes within the chunk."""
        plan = Plan()
        self._drop_cancelled(plan)
        for seq in list(self.running):
            while seq in self.running and not self.blocks.ensure(seq.id, seq.num_tokens):
                self._preempt(self.order[-1], plan)  # the newest; the sequence itself if it is the newest
        plan.decodes = list(self.running)
        self._admit(plan)
        self._plan_prefills(plan)
        return plan

    def _admit(self, plan: Plan) -> None:
        if self.policy == "static" and self.order:
            return  # a static batch admits only when the whole batch has finished
        newcomers: list[Sequence] = []
        while self.waiting and len(self.order) < self.max_num_seqs:
            with self._lock:
                seq = self.waiting[0]
            tokens = seq.tokens
            found = self.blocks.peek(tokens)
            if not self._fits(seq, found):
                break  # oldest first: a newcomer that does not fit holds back the ones behind it
            with self._lock:
                self.waiting.popleft()
            cached = self.blocks.lookup(seq.id, tokens, found)
            self.blocks.ensure(seq.id, max(seq.num_tokens, self.reserve or 0))
            if seq.preemptions:
                self.recomputed += seq.num_tokens - 1 - cached  # the last would have been decoded anyway
            seq.computed = cached
            self.order.append(seq)
            newcomers.append(seq)
        plan.admitted = len(newcomers)
        i = 0
        while i < len(newcomers):  # runs of newcomers starting at the same position, grouped as prefills.py says
            j = i
            while j < len(newcomers) and newcomers[j].computed == newcomers[i].computed:
                j += 1
            run = newcomers[i:j]
            for group in prefill_groups([s.num_tokens - s.computed for s in run], self.prefill_chunk):
                self.prefilling.append(Group([run[k] for k in group], run[0].computed))
            i = j

    def _fits(self, seq: Sequence, found: list[int]) -> bool:
        """Are there free blocks for `seq`'s prompt (or its reservation), counting the cached blocks it would find
        (`found`) that it would take out of the free queue?"""
        taken_from_free = sum(self.blocks.ref_counts[b] == 0 for b in found)
        need = blocks_for(max(seq.num_tokens, self.reserve or 0), self.blocks.block_size) - len(found)
        return need + taken_from_free <= self.blocks.num_free

    def _plan_prefills(self, plan: Plan) -> None:
        left = self.prefill_chunk
        for group in list(self.prefilling):
            remaining = group.longest - group.done
            n = prefill_piece(len(group.seqs), remaining, left)
            if n == 0 and left == self.prefill_chunk:
                n = remaining  # never left behind: a group larger than a step runs whole
            if n <= 0:
                break  # a group that does not fit what is left waits whole for the next step
            start = group.start + group.done
            group.done += n
            left -= len(group.seqs) * n
            done = group.done == group.longest
            plan.prefills.append(Pass(list(group.seqs), start, n, samples=done))
            for seq in group.seqs:
                seq.computed = min(seq.num_tokens, start + n)
            if done:
                self.prefilling.popleft()
                self.running += group.seqs
                # They join this step's decode pass, once their first token exists, if a block is free for it
                plan.decodes += [s for s in group.seqs if self.blocks.ensure(s.id, s.num_tokens + 1)]
            else:
                break  # a prompt in pieces: one piece a step

    def _drop_cancelled(self, plan: Plan) -> None:
        with self._lock:
            ids, self._cancelled = self._cancelled, set()
            for seq in [s for s in self.waiting if s.id in ids]:
                self.waiting.remove(seq)
                plan.cancelled.append(seq.request)
                ids.discard(seq.id)
        for seq in [s for s in self.order if s.id in ids]:
            self.finish(seq)
            plan.cancelled.append(seq.request)
            ids.discard(seq.id)
        with self._lock:
            self._cancelled |= ids  # not yet added: dropped when it is

    def _preempt(self, seq: Sequence, plan: Plan) -> None:
        self._remove(seq)
        seq.computed = 0
        seq.request.preemptions += 1
        self.preemptions += 1
        plan.preempted.append(seq)
        with self._lock:
            self.waiting.appendleft(seq)

    def _remove(self, seq: Sequence) -> None:
        """Take `seq` out of flight and give its blocks back."""
        self.blocks.free(seq.id)
        self.order.remove(seq)
        if seq in self.running:
            self.running.remove(seq)
        for group in list(self.prefilling):
            if seq in group.seqs:
                group.seqs.remove(seq)
                group.done = 0  # a group runs whole: one that loses a row has not begun
                if not group.seqs:
                    self.prefilling.remove(group)

    def finish(self, seq: Sequence) -> None:
        """`seq` has ended (its request is done, cancelled or failed): it leaves and gives its blocks back."""
        if seq in self.order:
            self._remove(seq)

    def retry_alone(self, p: Pass) -> None:
        """A pass of several sequences failed: prefill each of them again alone, from where the pass began, at the
        head of the queue, so that only a sequence that fails alone fails."""
        for seq in p.seqs:
            seq.computed = p.start
            if seq in self.running:
                self.running.remove(seq)
        self.prefilling.extendleft(Group([s], p.start) for s in reversed(p.seqs))

    def decodable(self, plan: Plan) -> list[Sequence]:
        """The plan's decodes that can run once its prefills have: still running (a failed pass's rows are not)
        and not done (a newcomer's first token may have ended it)."""
        return [s for s in plan.decodes if s in self.running and not s.request.done]

    def update(self, plan: Plan) -> None:
        """After the step ran and its tokens were appended (`plan.decodes` now those that ran: `decodable`): name
        the blocks that filled, for the prefix cache, and end the sequences whose requests are done."""
        for seq in plan.decodes:
            seq.computed = seq.num_tokens - 1  # every position but the newest token's
        for seq in [s for p in plan.prefills for s in p.seqs] + plan.decodes:
            if seq in self.order:
                if self.blocks.fills(seq.id, seq.computed):  # the tokens' list only when a block filled
                    self.blocks.name_full_blocks(seq.id, seq.tokens, seq.computed)
                if seq.request.done:
                    self.finish(seq)

    def fail_all(self, waiting: bool = True) -> list[Request]:
        """Take every sequence in flight (and, with `waiting`, every one queued) out, blocks given back; returns
        their requests."""
        ended = [s.request for s in self.order]
        for seq in list(self.order):
            self._remove(seq)
        if waiting:
            with self._lock:
                ended += [s.request for s in self.waiting]
                self.waiting.clear()
                self._cancelled.clear()
        return ended

"""A serving loop: many requests, one model, one batched decode step at a time.

A server does not get its requests in batches. They arrive one by one, each with its own prompt length and its own
number of tokens to generate, and each user wants tokens as soon as they exist. The engine keeps `max_batch` slots,
one per sequence in flight, in one KV cache, and repeats one step:

1. prefill: waiting requests enter while slots are free, and are prefilled in order, at most `prefill_chunk`
   positions a step (the device's by default; `llmperf.prefills`: newcomers together in one pass while their
   padding stays small, a long prompt in pieces over several steps, the batch decoding between them). A prompt's
   last pass gives its first token (its TTFT is its wait plus its prefill), and its keys and values go into a slot;
2. decode: one forward pass over the busy slots, each sequence at its own position (`KVCache` with per-sequence
   positions); every request in a slot gets one token.

Which requests may enter decides the policy:

- "continuous" (iteration-level scheduling, as in Orca and vLLM): a slot freed by a finished request is refilled at
  the very next step;
- "static": a batch is admitted together and runs until its last request ends; newcomers wait for the whole batch,
  however short their own request.

Every token is timestamped (time.perf_counter(), after the device finished it) so that `llmperf.metrics` can compute
TTFT, TPOT and the rest. The busy slots are always the first ones: when a request ends, the last busy slot's
sequence moves into its place (its keys and values are copied), so a decode step runs on exactly as many rows as
there are requests (`KVCache.first`), and one request alone is decoded at batch 1.

`prefills` counts the steps run so far by how many newcomers each admitted (0 for a step that admitted none), so a
run can say how often newcomers interrupted the batch, and how many at a time. `finished` counts the requests ended
by finish reason, `prompt_tokens` the prompt tokens prefilled and `generated_tokens` every token generated; the
server exports them (/metrics).

The engine is driven from one thread (`step`, or `run` until idle); `submit` and `cancel` may be called from any
thread.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import params
from .device import prefill_chunk as default_prefill_chunk, synchronize
from .generation import decode_step, new_cache, prefill, sample
from .model import Transformer
from .prefills import Prefill, drop, prefill_groups, prefill_piece
from .request import Request

POLICIES = ("continuous", "static")
@dataclass
class _Slot:
    request: Request
    generator: torch.Generator | None

    @property
    def position(self) -> int:
        """Where the request's newest token goes, which is also how many positions of the cache it has filled:
        the prompt's, then one per token fed back (every token but the newest)."""
        return len(self.request.prompt) + len(self.request.tokens) - 1


class Engine:
    """Continuous (or static) batching of decode steps over `max_batch` slots of up to `capacity` tokens each."""

    def __init__(self, model: Transformer, max_batch: int = 8, capacity: int = 1024, policy: str = "continuous",
                 prefill_chunk: int | None = None):
        if policy not in POLICIES:
            raise ValueError(f"Unknown batching policy {policy!r}; choose from {POLICIES}.")
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}.")
        if not 1 < capacity <= model.cfg.max_seq_len:
            raise ValueError(f"capacity must lie in 2..{model.cfg.max_seq_len} ({model.cfg.name}'s max_seq_len) "
                             f"tokens, got {capacity}.")
        if prefill_chunk is not None and prefill_chunk < 1:
            raise ValueError(f"prefill_chunk (positions prefilled per step) must be at least 1, got {prefill_chunk}.")
        self.model, self.max_batch, self.capacity, self.policy = model, max_batch, capacity, policy
        self.prefill_chunk = prefill_chunk or default_prefill_chunk(model.device)  # None: the device's default
        self.cache = new_cache(model, max_batch, capacity)
        self.slots: list[_Slot | None] = [None] * max_batch  # busy slots first, then free ones
        self._waiting: deque[Request] = deque()
        self._prefilling: deque[Prefill] = deque()  # admitted, each slot kept for it, prefilled in order
        self._cancelled: set[int] = set()
        self._lock = threading.Lock()
        self.finished: Counter[str] = Counter()  # requests ended so far, by finish reason
        self.prefills: Counter[int] = Counter()  # steps run so far, by how many newcomers each admitted
        self.prompt_tokens = 0  # prompt tokens prefilled so far
        self.generated_tokens = 0  # tokens generated so far, for every request, however it ended

    # --- called from any thread -------------------------------------------------------------

    def check(self, request: Request) -> None:
        """Raise `params.InvalidParameter` (a ValueError), saying what is wrong, if the engine cannot serve
        `request`; normalise its numbers to plain Python ones. The same checks as `generate` and the server,
        against this engine's `capacity`."""
        request.prompt = prompt = params.token_ids(request.prompt)
        request.max_tokens, request.temperature, request.top_k, request.top_p, request.seed = params.check(
            prompt_tokens=len(prompt), lowest_id=min(prompt, default=0), highest_id=max(prompt, default=0),
            max_tokens=request.max_tokens, temperature=request.temperature, top_k=request.top_k, top_p=request.top_p,
            seed=request.seed, context=self.capacity, vocab_size=self.model.cfg.vocab_size)

    def submit(self, request: Request) -> Request:
        """Queue `request` (checked first); it is admitted at a coming step. Returns it."""
        self.check(request)
        request.sent = time.perf_counter()
        with self._lock:
            self._waiting.append(request)
        return request

    def cancel(self, request: Request) -> None:
        """Stop `request` (a client went away): its slot is freed at the next step."""
        with self._lock:
            self._cancelled.add(request.id)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def active(self) -> int:
        """Requests admitted and not finished: decoding, or being prefilled (a slot is kept for each)."""
        return self._busy + sum(len(p.requests) for p in tuple(self._prefilling))  # a copy: others' threads read it

    @property
    def _busy(self) -> int:
        """Requests decoding: the first slots."""
        return sum(s is not None for s in self.slots)

    @property
    def cache_usage(self) -> float:
        """The fraction of the KV cache's positions (max_batch slots of `capacity`) that hold a key and value."""
        return sum(s.position for s in self.slots if s is not None) / (self.max_batch * self.capacity)

    @property
    def idle(self) -> bool:
        return self.active == 0 and not self._waiting

    # --- the loop ---------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self, deliver: Callable[[list[tuple[Request, int, float]]], None] | None = None
             ) -> list[tuple[Request, int, float]]:
        """One iteration: drop cancelled requests, admit waiting ones, prefill at most `prefill_chunk` positions,
        run one decode step over the slots.

        Returns (request, token, time) for every token produced, in order. `deliver`, if given, is called with
        the tokens as soon as they exist: a newcomer's first token right after its prompt's last pass, then the
        decode pass's. A server hands them over so, and a newcomer's TTFT does not also wait for the decode pass.
        """
        out: list[tuple[Request, int, float]] = []
        self._drop_cancelled()
        newcomers = []
        for _ in range(self._admissible()):
            request = self._next_waiting()
            if request is None:
                break
            newcomers.append(request)
        for group in prefill_groups([len(r.prompt) for r in newcomers], self.prefill_chunk):
            self._prefilling.append(Prefill([newcomers[j] for j in group]))
        prefilled = self._prefill(out, deliver)
        decoded = self._busy > 0
        if decoded:
            tokens = self._decode()
            out += tokens
            if deliver is not None and tokens:
                deliver(tokens)
        if newcomers or prefilled or decoded:
            self.prefills[len(newcomers)] += 1
        return out

    def run(self) -> None:
        """Step until every submitted request has finished."""
        while not self.idle:
            self.step()

    def _admissible(self) -> int:
        """How many waiting requests may enter now."""
        if self.policy == "static" and self.active:
            return 0  # a static batch admits only when the whole batch has finished
        return self.max_batch - self.active

    def _next_waiting(self) -> Request | None:
        with self._lock:
            while self._waiting:
                request = self._waiting.popleft()
                if request.id in self._cancelled:
                    self._cancelled.discard(request.id)
                    self._end(request, "cancelled")
                    continue
                return request
        return None

    def _drop_cancelled(self) -> None:
        with self._lock:
            cancelled, self._cancelled = self._cancelled, set()
        for i in reversed(range(self._busy)):  # from the end: freeing a slot moves only later ones
            if self.slots[i].request.id in cancelled:
                self._end(self.slots[i].request, "cancelled")
                cancelled.discard(self.slots[i].request.id)
                self._free(i)
        for request in drop(self._prefilling, cancelled):
            self._end(request, "cancelled")
            cancelled.discard(request.id)
        with self._lock:
            self._cancelled |= cancelled  # still waiting: dropped when it would be admitted

    def _prefill(self, out: list, deliver) -> bool:
        """Run the queued prefills in order, as many positions as `prefill_chunk` allows (`prefill_piece`; the
        first always runs), adding the first tokens of the prompts they finish to `out` and handing them to
        `deliver`. Returns whether any pass ran."""
        left = self.prefill_chunk
        while self._prefilling:
            p = self._prefilling[0]
            n = prefill_piece(len(p.requests), p.longest - p.done, left)
            if n == 0 and left == self.prefill_chunk:
                n = p.longest - p.done  # never left behind: a group larger than a step (prefill_chunk lowered) runs
            if n <= 0:
                break  # a group that does not fit what is left waits whole for the next step
            for r in p.requests:
                r.admitted = r.admitted or time.perf_counter()  # its wait in the queue ends with its first pass
            first = self._piece(p, n)
            left -= len(p.requests) * n
            out += first
            if deliver is not None and first:
                deliver(first)
        return left < self.prefill_chunk

    def _piece(self, p: Prefill, n: int) -> list[tuple[Request, int, float]]:
        """Prefill the next `n` positions of `p` (the queue's first). When that ends its prompts, copy each one's
        keys and values into the next free slot and emit its first token. If the pass fails, a group's requests
        go back to the queue's head one by one, so that only a request that fails alone fails."""
        lengths, device = [len(r.prompt) for r in p.requests], self.model.device
        first = self._busy  # the first free slot; the rest follow it
        try:
            if p.cache is None:
                p.cache = new_cache(self.model, len(p.requests), p.longest)
            prompts = torch.tensor([list(r.prompt[p.done:p.done + n]) + [0] * (p.done + n - len(r.prompt))
                                    for r in p.requests], device=device)  # (k, n): any id will do for the padding
            rows = torch.tensor(lengths, device=device) if min(lengths) < p.longest else None  # (k,): last positions
            logits = prefill(self.model, prompts, p.cache, start=p.done, lengths=rows)  # (k, vocab)
            p.done += n
            if p.done < p.longest:  # one prompt, more pieces to come
                self.prompt_tokens += n
                return []
            self._prefilling.popleft()
            for j, (request, length) in enumerate(zip(p.requests, lengths)):
                self.slots[first + j] = _Slot(request, None)
                self.cache.load(first + j, p.cache, length, source_slot=j)  # 0..length-1: its prompt's, no padding
        except Exception as e:  # no row of the pass can be trusted
            self.slots[first:first + len(p.requests)] = [None] * len(p.requests)  # free ones still: nothing moves
            if p in self._prefilling:
                self._prefilling.remove(p)
            if len(p.requests) == 1:
                self._end(p.requests[0], "error", e)  # this request's own failure: the others never see it
            else:
                self._prefilling.extendleft(Prefill([r]) for r in reversed(p.requests))
            return []
        self.prompt_tokens += n if len(lengths) == 1 else sum(lengths)  # a group's pass: all, without padding
        return self._sample(first, logits)

    def _decode(self) -> list[tuple[Request, int, float]]:
        """One forward pass over the busy slots (the first n), each sequence at its own position; one token each.
        If the pass itself fails, every request in it fails (no row's logits can be trusted)."""
        device = self.model.device
        busy = self.slots[:self._busy]
        try:
            last = torch.tensor([s.request.tokens[-1] for s in busy], device=device)[:, None]  # (n, 1)
            positions = torch.tensor([s.position for s in busy], device=device)  # (n,)
            logits = decode_step(self.model, last, positions, self.cache.first(len(busy)))  # (n, vocab)
        except Exception as e:
            for i in reversed(range(len(busy))):
                self._fail(i, e)
            return []
        return self._sample(0, logits)

    def _sample(self, first: int, logits: torch.Tensor) -> list[tuple[Request, int, float]]:
        """Sample the next token of slots first, first + 1, ... from their rows of `logits` (n, vocab), each
        request with its own generator (made from its seed at its first token), and emit them. If sampling one
        row fails, only that request does, and the others keep the tokens they would have had."""
        tokens: list[int | Exception] = []
        for j in range(len(logits)):
            s = self.slots[first + j]
            try:
                if s.request.seed is not None and s.generator is None:
                    s.generator = torch.Generator(device=self.model.device).manual_seed(s.request.seed)
                tokens.append(int(sample(logits[j:j + 1], s.request.temperature, s.request.top_k, s.generator,
                                         s.request.top_p)))
            except Exception as e:
                tokens.append(e)
        out = []
        for j in reversed(range(len(tokens))):  # from the end: freeing a slot moves only later ones
            if isinstance(tokens[j], Exception):
                self._fail(first + j, tokens[j])
            else:
                out += self._emit(first + j, tokens[j])
        return out[::-1]

    def _fail(self, i: int, error: Exception) -> None:
        """End slot i's request with finish reason "error", saying what failed, and free the slot."""
        self._end(self.slots[i].request, "error", error)
        self._free(i)

    def _end(self, request: Request, reason: str, error: Exception | str | None = None) -> None:
        """End `request` with finish reason `reason` ("cancelled", "error") and count it; an error says what failed."""
        request.finish_reason = reason
        request.error = f"{type(error).__name__}: {error}" if isinstance(error, Exception) else error
        self.finished[reason] += 1

    def fail_all(self, reason: str, waiting: bool = True) -> list[Request]:
        """End every request decoding or admitted to be prefilled (and, with `waiting`, every one still queued
        for a slot) with finish reason "error" and `reason`: the server is stopping, or a step failed in a way no
        one request can be blamed for. Returns them. Called from the thread that steps."""
        queued: list[Request] = []
        if waiting:
            with self._lock:
                queued, self._waiting, self._cancelled = list(self._waiting), deque(), set()
        ended = [s.request for s in self.slots if s is not None] + [r for p in self._prefilling for r in p.requests]
        self.slots, self._prefilling = [None] * self.max_batch, deque()
        ended += queued
        for request in ended:
            self._end(request, "error", reason)
        return ended

    def _emit(self, i: int, token: int) -> list[tuple[Request, int, float]]:
        """Record a token of slot i's request (timestamped once the device is done), and free the slot if
        the request is finished."""
        synchronize(self.model.device)
        now = time.perf_counter()
        request = self.slots[i].request
        request.tokens.append(token)
        request.token_times.append(now)
        self.generated_tokens += 1
        if token in request.stop_ids:
            request.finish_reason = "stop"
        elif len(request.tokens) == request.max_tokens:
            request.finish_reason = "length"
        if request.done:
            self.finished[request.finish_reason] += 1
            self._free(i)
        return [(request, token, now)]

    def _free(self, i: int) -> None:
        """Empty slot i, moving the last busy slot's sequence (and its keys and values) into it."""
        last = self._busy - 1
        if i != last:
            moved = self.slots[last]
            self.cache.load(i, self.cache, moved.position, source_slot=last)
            self.slots[i] = moved
        self.slots[last] = None

"""A serving loop: many requests, one model, one step at a time. Each step is

    schedule (`llmperf.scheduler`: which positions of which requests run, under a budget of KV blocks)
    -> run (`llmperf.runner`: prefill passes, one batched decode pass, one batched draw)
    -> postprocess (append each token with its time, end the requests that are done, count).

Requests arrive one by one, each with its own prompt and its own number of tokens to generate. A request's keys
and values live in blocks lent to it as it grows (a paged KV cache); a prompt that begins like an earlier one
shares that one's blocks and skips their prefill (prefix caching); when blocks run out, the newest request is
preempted and later prefilled again (its client sees a delay, not an error). With `reserve`, each request is given
a whole context's blocks when admitted instead, as a server without paging does: the comparison chapter 6 makes.

Every token is timestamped (time.perf_counter(), once the device has finished it: after the step's one copy of
its tokens to the host) so that `llmperf.metrics` can compute TTFT, TPOT and the rest.

Counted, for the server's /metrics: `finished` (requests ended, by finish reason), `prefills` (steps, by how many
newcomers each admitted), `prompt_tokens` (positions prefilled, recomputed ones included; padding and positions
found in the prefix cache not), `generated_tokens`; the scheduler counts preemptions and prefix-cache hits.

The engine is driven from one thread (`step`, or `run` until idle); `submit` and `cancel` may be called from any.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import torch

from . import request_checks
from .device import prefill_chunk as default_prefill_chunk
from .model import Transformer
from .request import Request
from .runner import ModelRunner
from .scheduler import Pass, Scheduler, Sequence, blocks_for
from .scheduler.scheduler import POLICIES

Delivered = list[tuple[Request, int, float]]


class Engine:
    """Continuous (or static) batching of up to `max_batch` requests of up to `capacity` tokens each, over a pool
    of `num_blocks` KV blocks of `block_size` positions (by default, enough for `max_batch` full contexts)."""

    def __init__(self, model: Transformer, max_batch: int = 8, capacity: int = 1024, policy: str = "continuous",
                 prefill_chunk: int | None = None, block_size: int = 16, num_blocks: int | None = None,
                 prefix_caching: bool = True, reserve: bool = False):
        if policy not in POLICIES:
            raise ValueError(f"Unknown batching policy {policy!r}; choose from {POLICIES}.")
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}.")
        if not 1 < capacity <= model.cfg.max_seq_len:
            raise ValueError(f"capacity must lie in 2..{model.cfg.max_seq_len} ({model.cfg.name}'s max_seq_len) "
                             f"tokens, got {capacity}.")
        if prefill_chunk is not None and prefill_chunk < 1:
            raise ValueError(f"prefill_chunk (positions prefilled per step) must be at least 1, got {prefill_chunk}.")
        if block_size < 1:
            raise ValueError(f"block_size (positions per KV block) must be at least 1, got {block_size}.")
        per_request = blocks_for(capacity, block_size)
        num_blocks = max_batch * per_request if num_blocks is None else num_blocks
        if num_blocks < per_request:
            raise ValueError(f"A KV pool of {num_blocks} blocks of {block_size} positions cannot hold one request "
                             f"of the whole context ({capacity} tokens: {per_request} blocks). Give it more blocks, "
                             "or a shorter context.")
        self.model, self.max_batch, self.capacity, self.policy = model, max_batch, capacity, policy
        self.prefill_chunk = prefill_chunk or default_prefill_chunk(model.device)  # None: the device's default
        self.scheduler = Scheduler(num_blocks, block_size, max_batch, self.prefill_chunk, policy, prefix_caching,
                                   reserve=capacity if reserve else None)
        self.runner = ModelRunner(model, num_blocks, block_size)
        self.finished: Counter[str] = Counter()  # requests ended so far, by finish reason
        self.prefills: Counter[int] = Counter()  # steps run so far, by how many newcomers each admitted
        self.prompt_tokens = 0  # positions prefilled so far (padding and prefix-cache hits not counted)
        self.generated_tokens = 0  # tokens generated so far, for every request, however it ended

    # --- called from any thread -------------------------------------------------------------

    def check(self, request: Request) -> None:
        """Raise `request_checks.InvalidParameter` (a ValueError), saying what is wrong, if the engine cannot serve
        `request`; normalise its numbers to plain Python ones. The same checks as `generate` and the server,
        against this engine's `capacity`."""
        request.prompt = prompt = request_checks.token_ids(request.prompt)
        request.max_tokens, request.temperature, request.top_k, request.top_p, request.seed = request_checks.check(
            prompt_tokens=len(prompt), lowest_id=min(prompt, default=0), highest_id=max(prompt, default=0),
            max_tokens=request.max_tokens, temperature=request.temperature, top_k=request.top_k,
            top_p=request.top_p, seed=request.seed, context=self.capacity, vocab_size=self.model.cfg.vocab_size)

    def submit(self, request: Request) -> Request:
        """Check `request`, then queue it (`add`). Returns it."""
        self.check(request)
        return self.add(request)

    def add(self, request: Request) -> Request:
        """Queue `request`, already checked (the server's protocol checks every request once); it is admitted at
        a coming step. Returns it."""
        request.sent = time.perf_counter()
        self.scheduler.add(request)
        return request

    def cancel(self, request: Request) -> None:
        """Stop `request` (a client went away): it leaves, and gives its blocks back, at the next step."""
        self.scheduler.cancel(request.id)

    @property
    def waiting(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def active(self) -> int:
        """Requests admitted and not finished: decoding, or being prefilled."""
        return self.scheduler.active

    @property
    def cache_usage(self) -> float:
        """The share of the KV pool's blocks held by requests in flight (vLLM's kv_cache_usage_perc)."""
        return self.scheduler.blocks.usage

    @property
    def idle(self) -> bool:
        return self.scheduler.idle

    # --- the loop ---------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self, deliver: Callable[[Delivered], None] | None = None) -> Delivered:
        """One iteration: schedule, run, postprocess. Returns (request, token, time) for every token produced, in
        order. `deliver`, if given, is called with the tokens as soon as they exist: a newcomer's first token right
        after its prompt's last pass, then the decode pass's, so that a newcomer's TTFT does not also wait for
        the decode pass."""
        plan = self.scheduler.schedule()
        for request in plan.cancelled:
            self._end(request, "cancelled")
        out: Delivered = []
        for p in plan.prefills:
            out += self._postprocess(p.seqs, self._prefill(p), deliver)
        plan.decodes = self.scheduler.decodable(plan)
        if plan.decodes:
            out += self._postprocess(plan.decodes, self._decode(plan.decodes), deliver)
        self.scheduler.update(plan)
        if plan.admitted or not plan.empty:
            self.prefills[plan.admitted] += 1
        return out

    def run(self) -> None:
        """Step until every submitted request has finished."""
        while not self.idle:
            self.step()

    def _tables(self, seqs: list[Sequence]) -> list[list[int]]:
        return [self.scheduler.blocks.tables[s.id] for s in seqs]

    def _prefill(self, p: Pass) -> list[int | Exception] | None:
        """Run one prefill pass; its rows' next tokens if it ends their prompts. If it fails, a pass of several
        goes back to the queue's head one row at a time, so that only a request that fails alone fails."""
        for seq in p.seqs:
            seq.request.admitted = seq.request.admitted or time.perf_counter()  # its wait ends with its first pass
        try:
            logits = self.runner.prefill(p, self._tables(p.seqs))
        except Exception as e:  # no row of the pass can be trusted
            if len(p.seqs) > 1:
                self.scheduler.retry_alone(p)
                return None
            return [e]
        self.prompt_tokens += sum(min(s.num_tokens, p.start + p.n) - p.start for s in p.seqs)
        return None if logits is None else self._sample(p.seqs, logits)

    def _decode(self, seqs: list[Sequence]) -> list[int | Exception]:
        """One decode pass over `seqs`; if the pass itself fails, every request in it fails."""
        try:
            logits = self.runner.decode(seqs, self._tables(seqs))
        except Exception as e:
            return [e] * len(seqs)
        return self._sample(seqs, logits)

    def _sample(self, seqs: list[Sequence], logits: torch.Tensor) -> list[int | Exception]:
        """The rows' next tokens, drawn together; if that fails, each row is drawn alone, and only a row that
        fails alone fails (its generators set back first, so the others draw what they would have)."""
        states = {r.id: g.get_state() for s in seqs if (g := self.runner.generators.get((r := s.request).id))}
        try:
            return self.runner.sample(seqs, logits)
        except Exception:
            for request_id, state in states.items():
                self.runner.generators[request_id].set_state(state)
        tokens: list[int | Exception] = []
        for j, seq in enumerate(seqs):
            try:
                tokens += self.runner.sample([seq], logits[j:j + 1])
            except Exception as e:
                tokens.append(e)
        return tokens

    def _postprocess(self, seqs: list[Sequence], tokens: list[int | Exception] | None,
                     deliver: Callable[[Delivered], None] | None) -> Delivered:
        """Append each sequence's new token, stamped with one time for the pass (its tokens are on the host, so
        the device is done), end the requests that are done, and hand the tokens to `deliver`."""
        if tokens is None:
            return []
        now, out = time.perf_counter(), []
        for seq, token in zip(seqs, tokens):
            request = seq.request
            if isinstance(token, Exception):
                self._end(request, "error", token)
                self.scheduler.finish(seq)
                continue
            request.tokens.append(token)
            request.token_times.append(now)
            self.generated_tokens += 1
            if token in request.stop_ids:
                request.finish_reason = "stop"
            elif len(request.tokens) == request.max_tokens:
                request.finish_reason = "length"
            if request.done:
                self.finished[request.finish_reason] += 1
                self.runner.forget(request.id)
            out.append((request, token, now))
        if deliver is not None and out:
            deliver(out)
        return out

    def _end(self, request: Request, reason: str, error: Exception | str | None = None) -> None:
        """End `request` with finish reason `reason` ("cancelled", "error") and count it; an error says what failed."""
        request.finish_reason = reason
        request.error = f"{type(error).__name__}: {error}" if isinstance(error, Exception) else error
        self.finished[reason] += 1
        self.runner.forget(request.id)

    def fail_all(self, reason: str, waiting: bool = True) -> list[Request]:
        """End every request in flight (and, with `waiting`, every one still queued) with finish reason "error" and
        `reason`: the server is stopping, or a step failed in a way no one request can be blamed for. Returns
        them. Called from the thread that steps."""
        ended = self.scheduler.fail_all(waiting)
        for request in ended:
            self._end(request, "error", reason)
        return ended

"""Where the KV cache's memory goes: one KV budget and one burst of requests, served three ways by the server's
engine, driven directly so that every step's memory can be read.

- reserved: each request is given a whole context's blocks when it is admitted (`Engine(reserve=True)`), as
  servers did before paging: memory for positions it may never fill;
- paged: blocks lent as each request grows (PagedAttention), with at most as many requests in flight as the budget
  holds at their largest (`Workload.max_num_seqs`), so that none is ever preempted;
- overcommitted: paged, on a quarter of the budget (OVERCOMMIT), with as many in flight: admission looks at prompts
  only, so when the answers outgrow the pool the newest requests are preempted and later prefilled again.

Each is first predicted from the lengths alone (`budget`); the measured counts must equal the dry run's exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property

import pandas as pd

from ... import metrics
from ...engine import Engine
from ...fast import served
from ...paged_cache import bytes_per_block
from ...progress import progress
from ...request import Request
from ...scheduler import blocks_for
from ..setup import Setup
from . import cache_claims
from .budget import BLOCK_SIZE, OVERCOMMIT, RESERVATIONS, Workload, dry_run, workload


@dataclass
class MemoryRun:
    """One burst served by the engine: its requests (tokens and their times), and after every step (time,
    requests in flight, blocks held, positions whose keys and values are written); the scheduler's counts, the
    blocks free at the end, and the dry run's prediction (preemptions, recomputed positions, most in flight)."""

    name: str
    budget: int
    max_num_seqs: int
    reserve: bool
    requests: list[Request]
    samples: list[tuple[float, int, int, int]]
    preemptions: int
    recomputed: int
    free_at_end: int
    predicted: tuple[int, int, int]
    block_size: int = BLOCK_SIZE

    @property
    def start(self) -> float:
        return min(r.sent for r in self.requests)

    @property
    def end(self) -> float:
        return max(r.token_times[-1] for r in self.requests)

    @property
    def most(self) -> int:
        """The most requests in flight after any step."""
        return max(row[1] for row in self.samples)

    def mean(self, i: int) -> float:
        """The time average over the run of each sample's field i (1: in flight, 2: blocks held, 3: positions
        written), each value held until the next step's."""
        return metrics.time_average([(row[0], row[i]) for row in self.samples], self.start, self.end)

    @property
    def use(self) -> float:
        """Measured: positions written ÷ positions held (blocks × block size), both averaged over the run."""
        return self.mean(3) / (self.mean(2) * self.block_size)

    @property
    def tok_s(self) -> float:
        """Output tokens/s, from the burst's send to its last token."""
        return sum(len(r.tokens) for r in self.requests) / (self.end - self.start)

    @property
    def ttfts(self) -> list[float]:
        return [metrics.RequestTimes(r.sent, r.token_times).ttft for r in self.requests]

    @property
    def preempted(self) -> list[Request]:
        return [r for r in self.requests if r.preemptions]

    @staticmethod
    def gaps(requests: list[Request]) -> list[float]:
        """Every gap between two successive tokens of `requests` (s): their ITLs, pooled."""
        return [g for r in requests for g in metrics.RequestTimes(r.sent, r.token_times).itl]

    def stall(self, requests: list[Request]) -> float | None:
        """The longest gap between two tokens of any of `requests` (s); None if there are none."""
        return max(self.gaps(requests), default=None)


def _steps(engine: Engine):
    while not engine.idle:
        yield engine.step()


def serve_burst(model, work: Workload, name: str, budget: int, max_num_seqs: int, reserve: bool) -> MemoryRun:
    """Send the whole workload at once to an engine over a pool of `budget` blocks (prefix caching off: the
    prompts share nothing), step it until every request is done, and read its memory after every step."""
    engine = Engine(model, max_batch=max_num_seqs, capacity=work.context, block_size=work.block_size,
                    num_blocks=budget, prefix_caching=False, reserve=reserve)
    predicted = dry_run(work, budget, max_num_seqs, reserve, engine.prefill_chunk)
    requests = [engine.submit(Request(list(p), a)) for p, a in zip(work.prompts, work.answers)]
    scheduler = engine.scheduler
    samples = [(min(r.sent for r in requests), 0, 0, 0)]
    for _ in progress(_steps(engine), f"{name}: steps"):
        samples.append((time.perf_counter(), scheduler.active, budget - scheduler.blocks.num_free,
                        sum(seq.computed for seq in scheduler.order)))
    return MemoryRun(name, budget, max_num_seqs, reserve, requests, samples, scheduler.preemptions,
                     scheduler.recomputed, scheduler.blocks.num_free, predicted, work.block_size)


@dataclass
class Memory:
    """The three runs of one workload (reserved, paged, overcommitted) and the KV bytes of one block."""

    work: Workload
    runs: dict[str, MemoryRun]
    block_bytes: int

    @property
    def reserved(self) -> MemoryRun:
        return self.runs["reserved"]

    @property
    def paged(self) -> MemoryRun:
        return self.runs["paged"]

    @property
    def over(self) -> MemoryRun:
        return self.runs["overcommitted"]

    @cached_property
    def identical(self) -> int:
        """Requests whose answer was the same token for token in the overcommitted run as in the paged one."""
        return sum(a.tokens == b.tokens for a, b in zip(self.paged.requests, self.over.requests))

    def numbers(self) -> dict[str, object]:
        """The measured half of what the prose reads (`predictions` is the other, glued before the runs)."""
        w, r, p, o = self.work, self.reserved, self.paged, self.over
        ttft = {k: metrics.percentile(run.ttfts, 50) for k, run in self.runs.items()}
        return {"mem_concurrency_text": cache_claims.at_once(r.most, p.most, w.at_once(True), w.at_once(False)),
                "mem_use_text": cache_claims.memory_use(r.use, p.use, w.use(True), w.use(False)),
                "mem_speed_text": cache_claims.burst_speed(r.tok_s, p.tok_s, ttft["reserved"], ttft["paged"]),
                "mem_preempt_text": cache_claims.preempted(o.preemptions, o.recomputed, len(o.preempted), w.n,
                                                           o.stall(o.preempted), metrics.percentile(o.gaps(o.requests), 50),
                                                           o.predicted[:2]),
                "mem_identical_text": cache_claims.identical(self.identical, w.n)}

    def table(self) -> pd.DataFrame:
        """One column per run, one row per quantity: the budget, requests in flight (predicted and measured), the
        share of held memory that held keys and values, output tokens/s, median TTFT, preemptions, positions
        prefilled again, and the longest gap between two tokens of any request."""
        runs = list(self.runs.values())

        def row(spec: str, value) -> list[str]:
            return [format(value(run), spec) for run in runs]

        return pd.DataFrame({
            "KV budget (blocks)": row(",d", lambda r: r.budget),
            "KV budget (MiB)": row(",.1f", lambda r: r.budget * self.block_bytes / 2**20),
            "most in flight, predicted": row("d", lambda r: r.predicted[2]),
            "most in flight, measured": row("d", lambda r: r.most),
            "mean in flight": row(".1f", lambda r: r.mean(1)),
            "KV share of held memory at each end, predicted (%)": row(".0f", lambda r: 100 * self.work.use(r.reserve)),
            "KV share of held memory over the run (%)": row(".0f", lambda r: 100 * r.use),
            "output tokens/s": row(",.1f", lambda r: r.tok_s),
            "median TTFT (ms)": row(",.0f", lambda r: metrics.percentile(r.ttfts, 50) * 1e3),
            "preemptions": row("d", lambda r: r.preemptions),
            "positions prefilled again": row(",d", lambda r: r.recomputed),
            "longest gap between two tokens (ms)": row(",.0f", lambda r: r.stall(r.requests) * 1e3),
        }, index=list(self.runs)).T

    def check(self) -> None:
        """Every request done with the tokens it asked for; the counts as the dry run predicted; as many in flight
        as the arithmetic says; every block given back."""
        w = self.work
        for run in self.runs.values():
            for request, asked in zip(run.requests, w.answers):
                assert request.finish_reason == "length" and len(request.tokens) == asked, (
                    f"{run.name}: request {request.id} ended {request.finish_reason!r} with {len(request.tokens)} "
                    f"of {asked} tokens ({request.error})")
            assert (run.preemptions, run.recomputed, run.most) == run.predicted, (
                f"{run.name}: {run.preemptions} preemptions, {run.recomputed} recomputed, {run.most} at once; the "
                f"scheduler's dry run predicted {run.predicted}")
            assert run.free_at_end == run.budget, f"{run.name}: {run.budget - run.free_at_end} blocks never freed"
        assert self.reserved.most == w.at_once(True) and self.paged.most == w.at_once(False), (
            f"{self.reserved.most} and {self.paged.most} at once; the arithmetic says {w.at_once(True)} and "
            f"{w.at_once(False)}")
        assert self.paged.most > self.reserved.most, "the workload's contexts must be longer than its requests"
        assert self.paged.preemptions == 0, "the paged run holds its requests at their largest: none is preempted"
        assert self.paged.use > self.reserved.use, (
            f"paged memory held {100 * self.paged.use:.0f} % KV, reserved {100 * self.reserved.use:.0f} %")


def memory_runs(s: Setup, seed: int = 0) -> Memory:
    """The chapter's three runs of one workload (`workload`), on the fused model the server decodes with: reserved
    and paged at one budget, with as many in flight as the paged budget holds at their largest; overcommitted, with
    as many in flight, on a quarter of the budget (OVERCOMMIT)."""
    work, model = workload(s.sizes, s.model.cfg.vocab_size, seed), served(s.model)
    runs = {}
    for name, budget, reserve in (("reserved", work.budget, True), ("paged", work.budget, False),
                                  ("overcommitted", work.budget // OVERCOMMIT, False)):
        runs[name] = serve_burst(model, work, name, budget, work.max_num_seqs, reserve)
    return Memory(work, runs, bytes_per_block(s.model.cfg, work.block_size, s.dtype))


def predictions(s: Setup, seed: int = 0) -> dict[str, object]:
    """What the prose says before the runs: the workload (`workload`), the budget, and the arithmetic's
    predictions, for SmolLM2's blocks in the chapter's dtype."""
    w = workload(s.sizes, s.model.cfg.vocab_size, seed)
    block_bytes = bytes_per_block(s.model.cfg, w.block_size, s.dtype)
    return {"mem_n": w.n, "mem_context": w.context, "mem_block": w.block_size, "mem_block_kib": block_bytes / 2**10,
            "mem_budget": w.budget, "mem_budget_mib": w.budget * block_bytes / 2**20, "mem_reservations": RESERVATIONS,
            "mem_left_over": w.budget % w.reservation,
            "mem_prompt_lo": min(map(len, w.prompts)), "mem_prompt_hi": max(map(len, w.prompts)),
            "mem_answer_lo": min(w.answers), "mem_answer_hi": max(w.answers),
            "mem_max_num_seqs": w.max_num_seqs, "mem_pred_reserved": w.at_once(True),
            "mem_pred_paged": w.at_once(False), "mem_pred_ratio": w.at_once(False) / w.at_once(True),
            "mem_pred_use_reserved": 100 * w.use(True), "mem_pred_use_paged": 100 * w.use(False),
            "mem_over_budget": w.budget // OVERCOMMIT,
            "mem_over_prompts": sum(blocks_for(len(q), w.block_size) for q in w.prompts),
            "mem_over_ends": sum(blocks_for(n, w.block_size) for n in w.lengths)}

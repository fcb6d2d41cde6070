"""DistServe's goodput, which only a sweep measures: one server of `serve_batch` slots loaded by `bench.sweep`
by rate (one request at a time, all at once, then rates between, each an open loop), what `python -m
llmperf.bench --sweep rate` runs. Its capacity against one request at a time, its knee, and the heaviest load
at which 90 % of requests met the chapter's objectives, and how many requests per load that share would need
to be a measurement rather than a demonstration (`share_sample_size`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ... import bench
from ...fast import served
from ...bench.sweep import Sweep
from ...book import Collapsed
from ...serve import background, create_app
from ..setup import Setup
from .claims import distserve_goodput, knee_text
from .served import NAME, synchronously

STEPS = 2  # rates between one at a time and all at once
CAPACITY_GAIN = 1.5  # all at once completes at least this many times the requests/s of one at a time
HALF_WIDTH, Z95 = 0.05, 1.96  # a share placed within ±5 points, 95 % of the time (the normal approximation)
SHOWN = ["load", "arrived (req/s)", "served (req/s)", "output (tokens/s)", "TTFT p50 (ms)", "TPOT p50 (ms)",
         "E2E p50 (ms)", "met objectives (%)"]


def share_sample_size(share: float, half_width: float = HALF_WIDTH, z: float = Z95) -> int:
    """Requests per load for a measured share near `share` (0.9: 90 % met the objectives) to lie within
    ±`half_width` of the true one in 95 % of runs: n = z² p (1 − p) / h², the binomial's normal approximation."""
    return math.ceil(z * z * share * (1 - share) / half_width ** 2)


@dataclass
class RateSweep:
    """The sweep of one server of `batch` slots, every request a `prompt_tokens`-token prompt asking
    `max_tokens` tokens, under latency `objectives` (s)."""

    device: str
    batch: int
    prompt_tokens: int
    max_tokens: int
    sweep: Sweep

    @property
    def points(self):
        return self.sweep.points

    @property
    def requests(self) -> int:
        """Requests per load."""
        first = self.points[0].summary
        return first.completed + first.failed

    @property
    def claim_size(self) -> tuple[int, float]:
        """The requests per load that the target share needs (`share_sample_size`), and the minutes the sweep
        would take at that size, its measured duration scaled by that many over the requests it ran."""
        need = share_sample_size(self.sweep.target)
        return need, sum(p.summary.duration for p in self.points) * need / self.requests / 60

    def numbers(self) -> dict[str, object]:
        first, top, knee = self.points[0].summary, self.sweep.capacity.summary, self.sweep.knee
        best, (need, minutes) = self.sweep.best, self.claim_size
        steps = sum(p.label == "rate" for p in self.points)  # STEPS, unless all at once gained nothing
        return {"rs_batch": self.batch, "rs_requests": self.requests, "rs_steps": steps,
                "rs_step_pct": 100 / self.requests, "rs_target_pct": 100 * self.sweep.target,
                "rs_half_pct": 100 * HALF_WIDTH, "rs_claim_n": need, "rs_claim_min": minutes,
                "rs_sync": first.request_throughput, "rs_capacity": top.request_throughput,
                "rs_capacity_tok": top.output_throughput, "rs_gain": top.request_throughput / first.request_throughput,
                "rs_knee_text": knee_text(knee and knee.load, knee.summary.output_throughput if knee else 0,
                                          knee.summary.e2e.median if knee else 0),
                "rs_goodput_text": distserve_goodput([p.load for p in self.points],
                                                     [p.summary.request_throughput for p in self.points],
                                                     [p.attainment for p in self.points], self.sweep.target,
                                                     self.points.index(best) if best else None,
                                                     self.requests)}

    def table(self):
        """A row per load, lightest first: what arrived, what was served, the latencies, the share on target."""
        data = pd.DataFrame(self.sweep.rows())[SHOWN]
        return Collapsed(data.style.format(precision=1, thousands=",", na_rep="—").hide(axis="index"), "sweep")

    def figure(self):
        """The exchange-rate curve of the sweep (`bench.report.sweep_figure`)."""
        from ...bench.report import sweep_figure

        return sweep_figure(self.sweep, f"one server of {self.batch} slots on {self.device}, swept by rate")

    def check(self) -> None:
        """Every request of every load completed with the tokens it asked; all at once served at least 1.5 times
        the requests/s of one at a time; the heaviest load said to meet the objectives did, by its records."""
        for p in self.points:
            assert all(r.ok and r.output_tokens == self.max_tokens for r in p.records), \
                f"at {p.load}: {[r.error for r in p.records if not r.ok]}"
        first, top = self.points[0].summary, self.sweep.capacity.summary
        assert top.request_throughput >= CAPACITY_GAIN * first.request_throughput, \
            (f"all at once served {top.request_throughput:.2f} requests/s, not {CAPACITY_GAIN} times one at a "
             f"time's {first.request_throughput:.2f}")
        best = self.sweep.best
        if best is not None:
            limits = self.sweep.objectives
            met = sum(r.ok and all((getattr(r.times, k) or 0) <= v for k, v in limits.items()) for r in best.records)
            assert met >= self.sweep.target * len(best.records), f"{best.load}: {met} of {len(best.records)} met"


def rate_sweep(s: Setup, objectives: dict[str, float]) -> RateSweep:
    """A fresh server of `serve_batch` slots swept by rate (`bench.sweep`, STEPS rates between one at a time
    and all at once), `serve_requests` ÷ 3 requests per load (at least 4), each of `serve_prompt` random tokens
    asking half of `serve_new_tokens`, two warm-up requests first; each load's share of requests meeting
    `objectives`. (Smaller than the other runs: the sweep runs every request 1 + STEPS + 1 times, the first
    time one at a time.)"""
    z = s.sizes
    n, new = max(4, z.serve_requests // 3), max(2, z.serve_new_tokens // 2)
    prompts = bench.synthetic_prompts(n, z.serve_prompt, vocab=s.tokenizer.vocab_size, seed=1)
    app = create_app(served(s.model), s.tokenizer, max_num_seqs=z.serve_batch,
                     max_model_len=z.serve_prompt + z.serve_new_tokens)
    with background(app) as server:
        result = synchronously(bench.sweep(server.url, NAME, prompts, new, steps=STEPS,
                                           objectives=objectives, warmups=2, show_progress=False))
    return RateSweep(s.device.type, z.serve_batch, z.serve_prompt, new, result)

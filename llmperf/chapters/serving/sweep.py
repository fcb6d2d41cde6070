"""Batch size as the exchange rate: the same server started with each maximum batch size of a sweep, loaded by
as many closed-loop clients as it has slots; what the server makes in all against what each user gets, how
the engine's steps carried the newcomers' prefills, the MLPerf latency limits each batch meets (on p99 TTFT
and p99 TPOT), goodput under objectives scaled to batch 1, and a fresh server's first request.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd

from ... import bench, metrics
from ...fast import served
from ...book import Collapsed
from ...metrics import RequestRecord
from ...prefills import PREFILL_CHUNK
from ...serve import background, create_app
from ..setup import Setup
from . import sources
from .claims import (goodput_peak, limits_met, prefill_bursts, step_time_path, throughput_path, user_against_server,
                     warm_up)
from .served import unwatched_load

LIMITS_MODEL = "Llama-3.1-8B"  # the MLPerf benchmark whose limits the chapter sets beside its sweep
# MLPerf Inference's (p99 TTFT, p99 TPOT) limits for LIMITS_MODEL, seconds, by scenario (from `sources`).
MLPERF_LIMITS = {r.scenario: (r.ttft_p99, r.tpot_p99) for r in sources.MLPERF_LIMITS if r.model == LIMITS_MODEL}
SLO_TTFT_X, SLO_TPOT_X = 5, 2  # goodput's objectives: TTFT within 5 times batch 1's median, TPOT twice its mean
# The largest batch makes at least this many times batch 1's tokens/s. Batch 1 runs the NumPy step's gemv, and
# the batches its packed products on a second thread pool; on a 2-core host the ratio went under 3 once.
THROUGHPUT_GAIN = 2.5
USER_NOISE = 1.05  # and no user gets faster than at batch 1, within 5 % for noise


@dataclass
class BatchPoint:
    """One server of `batch` slots and its closed-loop run: every request's record, the engine's steps by
    how many newcomers each admitted ({k: steps}, `Engine.prefills`), and the most positions it prefilled a step
    (`Engine.prefill_chunk`)."""

    batch: int
    requests: list[RequestRecord]
    prefills: dict[int, int] = field(default_factory=dict)
    prefill_chunk: int = PREFILL_CHUNK

    @property
    def steps(self) -> int:
        """Steps the engine ran for this run."""
        return sum(self.prefills.values())

    @cached_property
    def summary(self) -> metrics.RunSummary:
        return metrics.summarize(self.requests)


@dataclass
class BatchSweep:
    """The exchange-rate sweep: every request asks `max_tokens` tokens of a `prompt_tokens`-token prompt."""

    device: str
    prompt_tokens: int
    max_tokens: int
    points: list[BatchPoint]

    @property
    def batches(self) -> list[int]:
        return [p.batch for p in self.points]

    @property
    def tok_s(self) -> list[float]:
        """Output tokens/s of the whole server, per batch size."""
        return [p.summary.output_throughput for p in self.points]

    @property
    def per_user(self) -> list[float]:
        """Each user's tokens/s, 1 ÷ mean TPOT, per batch size."""
        return [1 / p.summary.tpot.mean for p in self.points]

    @property
    def req_s(self) -> list[float]:
        return [p.summary.request_throughput for p in self.points]

    def percentile(self, metric: str, q: str) -> list[float]:
        """One statistic ("median", "p99", ...) of one latency ("ttft", "tpot"), s, per batch size."""
        return [getattr(getattr(p.summary, metric), q) for p in self.points]

    @property
    def objectives(self) -> dict[str, float]:
        """Goodput's latency objectives (s): multiples of batch 1's median TTFT and mean TPOT."""
        first = self.points[0].summary
        return {"ttft": SLO_TTFT_X * first.ttft.median, "tpot": SLO_TPOT_X * first.tpot.mean}

    @property
    def goodput(self) -> list[float]:
        """Requests/s meeting both objectives, per batch size."""
        return [metrics.summarize(p.requests, self.objectives).goodput for p in self.points]

    @property
    def prefills_text(self) -> str:
        """How the largest batch's steps carried its prefills."""
        last = self.points[-1]
        return prefill_bursts(last.batch, last.steps, last.prefills, self.max_tokens, self.prompt_tokens,
                              last.prefill_chunk)

    @property
    def limits(self) -> dict[str, tuple[float, float]]:
        """MLPerf's (p99 TTFT, p99 TPOT) limits in seconds, by scenario, that the sweep is set beside
        (`MLPERF_LIMITS`): its figure draws them from the record."""
        return MLPERF_LIMITS

    def limits_text(self, scenario: str) -> str:
        ttft, tpot = self.limits[scenario]
        return limits_met(self.batches, self.percentile("ttft", "p99"), self.percentile("tpot", "p99"), ttft, tpot,
                          scenario)

    @property
    def warm_up(self) -> tuple[float, float]:
        """At batch 1, a fresh server's first TTFT and the median TTFT of the requests after it (s)."""
        ttfts = [r.times.ttft for r in self.points[0].requests if r.ok]
        return ttfts[0], statistics.median(ttfts[1:])

    def numbers(self) -> dict[str, object]:
        agg, user, ttft = self.tok_s, self.per_user, self.percentile("ttft", "median")
        return {"b_max": self.batches[-1], "agg_1": agg[0], "agg_max": agg[-1], "agg_gain": agg[-1] / agg[0],
                "agg_path_text": throughput_path(self.batches, agg),
                "step_path_text": step_time_path(self.batches, self.percentile("tpot", "mean")),
                "user_1": user[0], "user_max": user[-1], "ttft_1": ttft[0] * 1e3, "ttft_max": ttft[-1] * 1e3,
                "prefills_text": self.prefills_text,
                "server_limits": self.limits_text("server"), "interactive_limits": self.limits_text("interactive"),
                **{f"{name}_{what}": value for name, (ttft, tpot) in MLPERF_LIMITS.items()
                   for what, value in (("ttft_s", ttft), ("tpot_ms", tpot * 1e3), ("rate", 1 / tpot))},
                "slo_ttft_x": SLO_TTFT_X, "slo_tpot_x": SLO_TPOT_X, "slo_ttft_ms": self.objectives["ttft"] * 1e3,
                "slo_tpot_ms": self.objectives["tpot"] * 1e3,
                "goodput_text": goodput_peak(self.batches, self.req_s, self.goodput),
                "warmup_text": warm_up(*self.warm_up), **self.lone_prediction(2 * self.max_tokens)}

    def lone_prediction(self, tokens: int) -> dict[str, float]:
        """The exercise's prediction: one request of `tokens` tokens alone on the server, from batch 1's median
        TTFT and mean TPOT, E2E = TTFT + TPOT·(n − 1) (ms)."""
        first = self.points[0].summary
        return {"lone_tokens": tokens, "lone_gaps": tokens - 1, "lone_ttft_ms": first.ttft.median * 1e3,
                "lone_tpot_ms": first.tpot.mean * 1e3,
                "lone_pred_ms": (first.ttft.median + first.tpot.mean * (tokens - 1)) * 1e3}

    def table(self):
        """Per batch size: the server's tokens/s, each user's, median TTFT, mean and p99 TPOT; the caption says
        what each tokens/s counts (`user_against_server`)."""
        data = {"max batch (= clients)": self.batches, "output tokens/s": self.tok_s,
                "tokens/s per user": self.per_user,
                "TTFT p50 (ms)": [t * 1e3 for t in self.percentile("ttft", "median")],
                "TPOT mean (ms)": [t * 1e3 for t in self.percentile("tpot", "mean")],
                "TPOT p99 (ms)": [t * 1e3 for t in self.percentile("tpot", "p99")]}
        shown = (pd.DataFrame(data).style.format(precision=1, thousands=",")
                 .format(precision=0, thousands=",", subset=["TTFT p50 (ms)"]).hide(axis="index")
                 .set_caption(user_against_server(self.per_user[0], self.tok_s[0])))
        return Collapsed(shown, "sweep")

    def goodput_table(self):
        """Per batch size: requests/s, and goodput (requests/s meeting both objectives)."""
        o = self.objectives
        caption = f"objectives: TTFT ≤ {o['ttft'] * 1e3:,.0f} ms, TPOT ≤ {o['tpot'] * 1e3:.1f} ms"
        data = {"max batch (= clients)": self.batches, "requests/s": self.req_s, "goodput (requests/s)": self.goodput}
        return pd.DataFrame(data).style.format(precision=2).hide(axis="index").set_caption(caption)

    def check(self) -> None:
        """The exchange rate: at the largest batch the server makes at least THROUGHPUT_GAIN times the tokens/s
        of batch 1, while no user gets faster (5 % for noise)."""
        agg, user = self.tok_s, self.per_user
        assert agg[-1] >= THROUGHPUT_GAIN * agg[0], \
            f"batch {self.batches[-1]} made {agg[-1]:.1f} tokens/s, not {THROUGHPUT_GAIN} times batch 1's " \
            f"{agg[0]:.1f}: {agg}"
        assert user[-1] <= USER_NOISE * user[0], \
            f"a user got {user[-1]:.1f} tokens/s at batch {self.batches[-1]}, faster than {user[0]:.1f} at batch 1"


def batch_sweep(s: Setup) -> BatchSweep:
    """For each max batch size b of `sizes.serve_batches`: a fresh server of b slots, and b closed-loop
    clients sending max(4, 2b) requests of `serve_prompt` random tokens (seeded by b), each asking
    `serve_new_tokens` tokens; the engine's count of prefills per step kept with each."""
    z, points = s.sizes, []
    for b in z.serve_batches:
        prompts = bench.synthetic_prompts(max(4, 2 * b), z.serve_prompt, vocab=s.tokenizer.vocab_size, seed=b)
        app = create_app(served(s.model), s.tokenizer, max_num_seqs=b,
                         max_model_len=z.serve_prompt + z.serve_new_tokens)
        with background(app) as server:
            requests = unwatched_load(server, prompts, z.serve_new_tokens, concurrency=b)
            points.append(BatchPoint(b, requests, dict(server.engine.prefills), server.engine.prefill_chunk))
    return BatchSweep(s.device.type, z.serve_prompt, z.serve_new_tokens, points)


def explore_view(sweep: BatchSweep):
    """The exchange rate predicted for any model and accelerator (`llmperf.explore`), with this machine's
    measured sweep as markers: Llama-3-8B on an H100 to start."""
    from ...explore import page

    return page.embed("exchange", measured=[{"label": "SmolLM2 on this machine, measured",
                                             "x": sweep.per_user, "y": sweep.tok_s}])

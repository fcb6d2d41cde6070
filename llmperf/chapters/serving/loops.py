"""Open loop against closed loop (coordinated omission): one workload in which one request carries a long
prompt whose prefill stalls the server, sent first by closed-loop clients, then open-loop at `OPEN_LOAD` of the
rate they achieved (so that the server keeps up between stalls, and what the open loop adds is the stall's
arrivals, not a backlog that never drains); and how far the open loop's TTFT percentiles rest on its few
slowest requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pandas as pd

from ... import bench, metrics
from ...fast import served
from ...metrics import RequestRecord
from ...prefills import PREFILL_CHUNK
from ...serve import background, create_app
from ..setup import Setup
from .claims import OMISSION_QS, long_prefill, omission, percentile_spread
from .run import LITTLES_MARGIN
from .served import matching_seed, request_lengths, watched_load

RESAMPLES, COVERAGE = 2000, 90  # reruns drawn by resampling the open loop's TTFTs; the share of them shown, %
OPEN_LOAD = 0.7  # the open loop's rate, as a share of the closed loop's measured throughput (its utilisation)


@dataclass
class Loop:
    """One run of the stall workload: how it was loaded ({"concurrency": C}, or {"rate": requests/s, "seed":
    of the arrival gaps}), every request's record, the server's polled (time, requests in flight), and which
    request carries the long prompt."""

    name: str  # "closed" or "open"
    load: dict[str, float]
    requests: list[RequestRecord]
    polled: list[tuple[float, int]]
    long_index: int

    @cached_property
    def summary(self) -> metrics.RunSummary:
        return metrics.summarize(self.requests)

    @property
    def stall(self) -> tuple[float, float]:
        """The long request, from when it was sent to its first token: its wait and its prefill (clock, s)."""
        long = self.requests[self.long_index]
        return long.sent, long.token_times[0]

    @property
    def sent_in_stall(self) -> int:
        """Requests sent while the long prompt waited and was prefilled."""
        start, end = self.stall
        return sum(start < r.sent < end for r in self.requests)

    @property
    def other_ttfts(self) -> list[float]:
        """The TTFTs of the completed requests other than the long one (s)."""
        return [r.times.ttft for i, r in enumerate(self.requests) if i != self.long_index and r.ok]

    @property
    def other_percentiles(self) -> dict[int, float]:
        """The p50, p90 and p99 of `other_ttfts`, interpolated (s)."""
        return {q: metrics.percentile(self.other_ttfts, q) for q in OMISSION_QS}

    @cached_property
    def littles(self) -> tuple[float, float]:
        """(L polled, λ·W from the client's clock)."""
        return metrics.littles_law_polled(self.requests, self.polled)

    @property
    def ttfts(self) -> list[float]:
        return [r.times.ttft for r in self.requests if r.ok]


@dataclass
class Loops:
    """The closed loop (`concurrency` clients) and the open loop of the stall workload, whose long request has
    a `long_prompt`-token prompt and asks for one token, on a server prefilling at most `prefill_chunk` positions
    a step."""

    concurrency: int
    long_prompt: int
    closed: Loop
    open: Loop
    prefill_chunk: int = PREFILL_CHUNK

    @property
    def loops(self) -> tuple[Loop, Loop]:
        return self.closed, self.open

    @property
    def stall_s(self) -> float:
        """The long prompt's wait and prefill, mean of the two loops (s)."""
        return sum(end - start for start, end in (x.stall for x in self.loops)) / 2

    @property
    def percentiles(self) -> dict[str, float]:
        """The open loop's TTFT p99, interpolated and nearest rank, and its largest TTFT (s)."""
        ttfts = self.open.ttfts
        return {"linear": metrics.percentile(ttfts, 99, "linear"),
                "nearest_rank": metrics.percentile(ttfts, 99, "nearest_rank"), "max": max(ttfts)}

    @property
    def spread(self) -> dict[int, tuple[float, float]]:
        """Where the open loop's TTFT p50 and p99 fell in 90 % of 2,000 resampled reruns (s)."""
        return metrics.bootstrap_percentiles(self.open.ttfts, (50, 99), RESAMPLES, COVERAGE, seed=0)

    def numbers(self) -> dict[str, object]:
        c, o, p, spread = self.closed, self.open, self.percentiles, self.spread
        return {"long": self.long_prompt, "long_prefill_text": long_prefill(self.long_prompt, self.prefill_chunk),
                "closed_rate": c.summary.request_throughput,
                "open_rate": o.summary.request_throughput,
                "open_load_pct": 100 * o.load["rate"] / c.summary.request_throughput,
                "omission_text": omission(c.sent_in_stall, o.sent_in_stall, o.load["rate"] * self.stall_s,
                                          c.other_percentiles, o.other_percentiles, self.stall_s),
                "n_ttft": len(o.ttfts), "p99_linear": p["linear"] * 1e3, "p99_nearest": p["nearest_rank"] * 1e3,
                "ttft_max_ms": p["max"] * 1e3,
                "spread_text": percentile_spread(spread[50], spread[99], len(o.ttfts), p["max"]),
                "resamples": RESAMPLES, "coverage": COVERAGE}

    def table(self):
        """Per loop: requests/s, the other requests' TTFT p50, p90 and p99 (ms), the most in flight, and the
        requests sent during the long prefill."""
        data = [{"loop": x.name, "requests/s": x.summary.request_throughput,
                 **{f"TTFT p{q} (ms)": v * 1e3 for q, v in x.other_percentiles.items()},
                 "most in flight": max(v for _, v in x.polled),
                 "sent during the long prefill": x.sent_in_stall} for x in self.loops]
        caption = (f"the TTFTs of the {len(self.closed.other_ttfts)} requests other than the long one, "
                   "interpolated")
        return (pd.DataFrame(data).style.format(precision=0, thousands=",")
                .format(precision=2, subset=["requests/s"]).hide(axis="index").set_caption(caption))

    def percentile_table(self):
        """The open loop's TTFT p50 and p99 (ms): interpolated, nearest rank, and the range of 90 % of the
        resampled reruns."""
        ttfts, spread = self.open.ttfts, self.spread
        data = [{"percentile": f"p{q}", "interpolated (ms)": metrics.percentile(ttfts, q) * 1e3,
                 "nearest rank (ms)": metrics.percentile(ttfts, q, "nearest_rank") * 1e3,
                 "resampled, from (ms)": spread[q][0] * 1e3, "resampled, to (ms)": spread[q][1] * 1e3}
                for q in (50, 99)]
        caption = (f"{len(ttfts)} TTFTs of the open loop, the largest {max(ttfts) * 1e3:,.1f} ms; interpolated as "
                   f"NumPy and vLLM do, nearest rank as MLPerf does; resampled: where {COVERAGE} % of "
                   f"{RESAMPLES:,} resampled reruns put it")
        return (pd.DataFrame(data).style.format(precision=1, thousands=",").hide(axis="index")
                .set_caption(caption))

    def check(self) -> None:
        """Little's Law in both loops; a closed loop never holds more than its clients; every request done."""
        for x in self.loops:
            L, lam_w = x.littles
            assert abs(L / lam_w - 1) < LITTLES_MARGIN, \
                f"{x.name} loop: L = {L:.3f} polled against λ·W = {lam_w:.3f}, more than 10 % apart"
        most = max(v for _, v in self.closed.polled)
        assert most <= self.concurrency, f"the closed loop of {self.concurrency} clients had {most} in flight"
        failed = [r.error for x in self.loops for r in x.requests if not r.ok]
        assert not failed, f"requests failed: {failed}"


def stall_loops(s: Setup) -> Loops:
    """`serve_requests` requests of `serve_prompt` random tokens (asking the closed run's lengths), one of them,
    a third of the way in, replaced by a `serve_long_prompt`-token prompt asking one token; sent to one server
    of `serve_batch` slots by `serve_batch` closed-loop clients, then open loop (Poisson arrivals) at
    `OPEN_LOAD` of the rate the closed loop achieved, with the seed whose gaps match that rate best. Both runs are
    polled."""
    z = s.sizes
    n, k = z.serve_requests, z.serve_requests // 3  # the long request comes a third of the way in
    prompts = bench.synthetic_prompts(n, z.serve_prompt, vocab=s.tokenizer.vocab_size, seed=1)
    prompts[k] = bench.synthetic_prompts(1, z.serve_long_prompt, vocab=s.tokenizer.vocab_size, seed=2)[0]
    lengths = request_lengths(n, z.serve_new_tokens)
    lengths[k] = 1  # the long request asks for one token
    app = create_app(served(s.model), s.tokenizer, max_num_seqs=z.serve_batch,
                     max_model_len=z.serve_long_prompt + z.serve_new_tokens)
    with background(app) as server:
        load = {"concurrency": z.serve_batch}
        closed = Loop("closed", load, *watched_load(server, prompts, lengths, **load), k)
        rate = OPEN_LOAD * closed.summary.request_throughput  # a load the server keeps up with between stalls
        load = {"rate": rate, "seed": matching_seed(rate, n)}
        opened = Loop("open", load, *watched_load(server, prompts, lengths, **load), k)
        chunk = server.engine.prefill_chunk
    return Loops(z.serve_batch, z.serve_long_prompt, closed, opened, chunk)

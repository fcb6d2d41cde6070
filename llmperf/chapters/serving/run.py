"""One closed-loop load run against the course's server, and what the chapter reads off it: the four numbers
(TTFT, TPOT, E2E, throughput), the identity E2E = TTFT + TPOT·(n − 1) and how far it is from holding between
the run's percentiles, TPOT against ITL, and Little's Law between the server's own count (its /metrics, scraped)
and the client's clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pandas as pd

from ... import bench, metrics
from ...fast import served
from ...metrics import RequestRecord
from ...serve import background, create_app
from ..setup import Setup
from .claims import itl_against_tpot, percentiles_add, residual_text
from .served import request_lengths, unwatched_load, watched_load

IDENTITY_ROUNDING = 1e-9  # s: how far E2E may sit from TTFT + TPOT·(n − 1) (floating-point rounding)
DRAWN = 6  # tokens of the request drawn token by token
LITTLES_MARGIN = 0.10  # how far the server's polled L may sit from the client's λ·W, as a fraction


@dataclass
class Run:
    """A closed loop of `concurrency` clients against a server of as many slots: `asked[i]` tokens asked by
    request i, each of a `prompt_tokens`-token prompt, its record (sent, arrival of each streamed chunk, the
    server's usage, any error), and the server's count of requests in flight, polled as (time, count)."""

    device: str
    concurrency: int
    prompt_tokens: int
    max_tokens: int  # the longest answer a request may ask for
    asked: list[int]
    requests: list[RequestRecord]
    polled: list[tuple[float, int]]

    @cached_property
    def summary(self) -> metrics.RunSummary:
        """The run's throughputs and latency statistics (`metrics.summarize`)."""
        return metrics.summarize(self.requests)

    @property
    def times(self) -> list[metrics.RequestTimes]:
        """Every completed request's latencies."""
        return [r.times for r in self.requests if r.ok]

    @property
    def residual(self) -> float:
        """The largest |E2E − (TTFT + TPOT·(n − 1))| over the requests with a TPOT (s)."""
        return max(abs(t.e2e - (t.ttft + t.tpot * (t.n_tokens - 1))) for t in self.times if t.tpot is not None)

    def rebuilt(self, q: float) -> tuple[float, float]:
        """(the run's q-th percentile of E2E, the q-th percentile of TTFT + that of TPOT × (that of n − 1)), s:
        the identity applied to the percentiles, over the requests with a TPOT."""
        timed = [t for t in self.times if t.tpot is not None]
        p = {name: metrics.percentile([getattr(t, name) for t in timed], q) for name in ("e2e", "ttft", "tpot")}
        n = metrics.percentile([t.n_tokens for t in timed], q)
        return p["e2e"], p["ttft"] + p["tpot"] * (n - 1)

    @property
    def drawn(self) -> RequestRecord:
        """The request the chapter draws token by token: the first completed one of DRAWN tokens (few enough to
        label every gap), else the one closest to that length."""
        return min((r for r in self.requests if r.ok and len(r.token_times) > 1),
                   key=lambda r: abs(len(r.token_times) - DRAWN))

    @property
    def overshoots(self) -> list[float]:
        """Per request with a TPOT: TTFT + TPOT·n − E2E, what the quoted form adds (s)."""
        return [t.ttft + t.tpot * t.n_tokens - t.e2e for t in self.times if t.tpot is not None]

    @property
    def weighted_tpot(self) -> float:
        """The requests' TPOTs, each weighted by its n − 1 gaps (s): mean ITL when every chunk is one token."""
        timed = [t for t in self.times if t.tpot is not None]
        return sum(t.tpot * (t.n_tokens - 1) for t in timed) / sum(t.n_tokens - 1 for t in timed)

    @property
    def one_token_chunks(self) -> bool:
        """Whether every streamed chunk carried exactly one token (arrivals = the usage's token count)."""
        return all(len(r.token_times) == r.output_tokens for r in self.requests)

    @cached_property
    def littles(self) -> tuple[float, float]:
        """(L, λ·W): the mean of the server's polled count, and send rate × mean E2E from the client's clock."""
        return metrics.littles_law_polled(self.requests, self.polled)

    @property
    def littles_gap(self) -> float:
        """|L ÷ λ·W − 1|."""
        L, lam_w = self.littles
        return abs(L / lam_w - 1)

    def numbers(self) -> dict[str, object]:
        s, (L, lam_w) = self.summary, self.littles
        return {"T": self.max_tokens, "run_tok_s": s.output_throughput, "run_req_s": s.request_throughput,
                "run_ttft_p50": s.ttft.median * 1e3, "run_ttft_p99": s.ttft.p99 * 1e3,
                "run_tpot_p50": s.tpot.median * 1e3, "run_e2e_p50": s.e2e.median,
                "residual_text": residual_text(self.residual, IDENTITY_ROUNDING),
                "overshoot_ms": sum(self.overshoots) / len(self.overshoots) * 1e3,
                "itl_text": itl_against_tpot(s.tpot.mean, s.itl.mean),
                "p50_add_text": percentiles_add(50, *self.rebuilt(50)),
                "p99_add_text": percentiles_add(99, *self.rebuilt(99)),
                "drawn_n": len(self.drawn.token_times), "drawn_ttft_ms": self.drawn.times.ttft * 1e3,
                "drawn_e2e_ms": self.drawn.times.e2e * 1e3,
                "L_polled": L, "lam": s.request_throughput, "W": s.e2e.mean, "lam_w": lam_w,
                "littles_pct": 100 * self.littles_gap}

    def table(self):
        """Each latency's mean, median, p90 and p99 (ms) over the run; the counts and throughputs above it."""
        s = self.summary
        rows = [{"metric": name, "mean (ms)": st.mean * 1e3, "median (ms)": st.median * 1e3,
                 "p90 (ms)": st.p90 * 1e3, "p99 (ms)": st.p99 * 1e3, "values": st.count}
                for name, st in (("TTFT", s.ttft), ("TPOT", s.tpot), ("ITL", s.itl), ("E2E", s.e2e))
                if st is not None]
        caption = (f"{s.completed} requests completed, {s.failed} failed, in {s.duration:.2f} s: "
                   f"{s.request_throughput:.2f} requests/s, {s.output_throughput:,.1f} output tokens/s, "
                   f"{s.total_throughput:,.1f} tokens/s input and output (percentiles: {s.method})")
        return (pd.DataFrame(rows).style.format(precision=2, thousands=",").hide(axis="index")
                .set_caption(caption))

    def identity_table(self, rows: int = 6):
        """The first `rows` requests: n, TTFT, TPOT, E2E, and the two ways of rebuilding E2E (ms)."""
        data = [{"n": t.n_tokens, "TTFT (ms)": t.ttft * 1e3, "TPOT (ms)": t.tpot * 1e3, "E2E (ms)": t.e2e * 1e3,
                 "TTFT + TPOT·(n − 1) (ms)": (t.ttft + t.tpot * (t.n_tokens - 1)) * 1e3,
                 "TTFT + TPOT·n (ms)": (t.ttft + t.tpot * t.n_tokens) * 1e3}
                for t in self.times[:rows] if t.tpot is not None]
        return pd.DataFrame(data).style.format(precision=1).format(precision=2, subset=["TPOT (ms)"]).hide(
            axis="index")

    def gap_table(self):
        """Mean TPOT (each request once), mean ITL (each gap once) and the TPOTs weighted by their gaps (ms)."""
        s = self.summary
        data = [("mean TPOT (each request once)", s.tpot.mean), ("mean ITL (each gap once)", s.itl.mean),
                ("TPOT weighted by gaps", self.weighted_tpot)]
        caption = f"every streamed chunk carried one token: {'yes' if self.one_token_chunks else 'no'}"
        return (pd.DataFrame([{"mean": what, "time (ms)": t * 1e3} for what, t in data]).style.format(precision=2)
                .hide(axis="index").set_caption(caption))

    def littles_table(self):
        """L as the server counted it, against λ·W from the client's clock."""
        s, (L, lam_w) = self.summary, self.littles
        data = [("L: the server's count, time-averaged", f"{len(self.polled)} scrapes of its /metrics", L),
                ("λ·W: the client's clock",
                 f"{s.request_throughput:.2f} requests/s sent × mean E2E {s.e2e.mean:.2f} s", lam_w)]
        return (pd.DataFrame(data, columns=["measured", "from", "requests in flight"]).style
                .format(precision=2).hide(axis="index"))

    def check(self) -> None:
        """What the chapter asserts about this run (see the notebook's last cell)."""
        # 1. Every request completed, with exactly the tokens it asked for (the server's usage says so).
        assert all(r.ok for r in self.requests), f"requests failed: {[r.error for r in self.requests if not r.ok]}"
        got = [r.output_tokens for r in self.requests]
        assert got == self.asked, f"tokens received {got} differ from those asked {self.asked}"
        # 2. E2E = TTFT + TPOT·(n − 1) for every request, to rounding; TTFT + TPOT·n overshoots by one TPOT.
        assert self.residual < IDENTITY_ROUNDING, f"E2E − (TTFT + TPOT·(n − 1)) reached {self.residual} s"
        assert all(abs(o - t.tpot) < IDENTITY_ROUNDING
                   for o, t in zip(self.overshoots, [t for t in self.times if t.tpot is not None])), \
            "TTFT + TPOT·n does not overshoot E2E by exactly one TPOT"
        # 3. Mean ITL is the TPOTs weighted by their gaps (when every chunk carried one token).
        itl = self.summary.itl.mean
        assert not self.one_token_chunks or abs(itl - self.weighted_tpot) < IDENTITY_ROUNDING * self.weighted_tpot, \
            f"mean ITL {itl} s is not the gap-weighted TPOT {self.weighted_tpot} s"
        # 4. Little's Law: the server's polled count within 10 % of λ·W.
        assert self.littles_gap < LITTLES_MARGIN, \
            (f"Little's Law: L = {self.littles[0]:.3f} polled against λ·W = {self.littles[1]:.3f}, more than 10 % "
             "apart")


def setup_numbers(s: Setup) -> dict[str, object]:
    """The sizes the chapter's prose names before its first run (all from `s.sizes`): the device, the closed
    loop's clients and the server's slots (C), the requests of a run (N), their prompt tokens (P) and the most
    tokens one asks (max_len)."""
    z = s.sizes
    return {"device": s.device.type, "C": z.serve_batch, "N": z.serve_requests, "P": z.serve_prompt,
            "max_len": z.serve_new_tokens}


def closed_run(s: Setup) -> Run:
    """`sizes.serve_requests` requests of `serve_prompt` random tokens, asking 2 to `serve_new_tokens` tokens
    each, sent by `serve_batch` closed-loop clients to a fresh server of `serve_batch` slots, every response
    streamed, the server's count of requests in flight read from its /metrics every 50 ms."""
    z = s.sizes
    asked = request_lengths(z.serve_requests, z.serve_new_tokens)
    prompts = bench.synthetic_prompts(z.serve_requests, z.serve_prompt, vocab=s.tokenizer.vocab_size, seed=0)
    app = create_app(served(s.model), s.tokenizer, max_num_seqs=z.serve_batch,
                     max_model_len=z.serve_prompt + z.serve_new_tokens)
    with background(app) as server:
        requests, polled = watched_load(server, prompts, asked, concurrency=z.serve_batch)
    return Run(s.device.type, z.serve_batch, z.serve_prompt, z.serve_new_tokens, asked, requests, polled)


def lone_request(s: Setup, tokens: int) -> RequestRecord:
    """One request of `serve_prompt` random tokens asking `tokens` tokens, alone on a fresh server of one slot,
    streamed: its record."""
    prompt = s.sizes.serve_prompt
    prompts = bench.synthetic_prompts(1, prompt, vocab=s.tokenizer.vocab_size, seed=3)
    with background(create_app(served(s.model), s.tokenizer, max_num_seqs=1,
                               max_model_len=prompt + tokens)) as server:
        [record] = unwatched_load(server, prompts, tokens, concurrency=1)
    return record


def answer_table(completion):
    """One chat completion from the official `openai` client, as a one-row table: its text and its usage."""
    return pd.DataFrame([{"answer": completion.choices[0].message.content,
                          "prompt tokens": completion.usage.prompt_tokens,
                          "completion tokens": completion.usage.completion_tokens}]).style.hide(axis="index")

"""Latency metrics from timestamps, as the serving benchmarks define them.

Pure Python (no torch): the input is a request's timestamps, in seconds on one
clock (time.perf_counter()), and nothing else. The definitions are those of
vLLM's benchmark, MLPerf Inference and NVIDIA GenAI-Perf
(shared/reference/facts.md):

- TTFT, time to first token = first token's arrival − the moment the request
  was sent. It includes any queueing and the whole prefill.
- E2E, end-to-end latency = last token's arrival − the moment it was sent.
- TPOT, time per output token = (E2E − TTFT) / (n − 1) for n output tokens: the
  mean gap after the first token. Not defined for n = 1 (None here), and it
  leaves TTFT out, so a slow prefill does not hide in it.
- ITL, inter-token latencies = every gap between successive tokens (n − 1 of
  them); TPOT is their mean.

A token is a token: a server that streams several tokens in one chunk must be
timed per token, not per chunk, or n is undercounted. A client sees only when
each chunk arrives, so `RequestTimes` takes the chunks' arrival times and,
separately, the number of tokens (from the server's `usage`): TPOT then divides
by the true n, while the inter-token gaps are gaps between chunks, which equal
the gaps between tokens only when every chunk carries one token.

A whole run (`summarize`) adds, with `dur` the run's wall time, from the first
request sent to the last one ended, successful or not (as vLLM's benchmark
divides by its run's wall time: a run whose requests stall or fail must not
look fast):

- request throughput = completed requests / dur; output token throughput =
  Σ output tokens / dur; total token throughput = Σ (input + output) / dur;
- goodput = requests that met every latency objective / dur (DistServe's
  definition);
- percentiles with the method named: "linear" interpolates between the two
  nearest values (NumPy's default, vLLM's benchmark), "nearest_rank" takes the
  smallest value with at least q % of the values at or below it (MLPerf); how
  far a percentile would move in a repeated run, by resampling the run
  (`bootstrap_percentiles`), all in `llmperf.percentiles`;
- TTFT, TPOT and E2E statistics are per request (each request counts once); ITL
  statistics pool every gap of every request (each token counts once), so a
  long answer weighs more in ITL than in TPOT;
- Little's Law: the mean number of requests in flight, integrated from the
  timestamps, against arrival rate × mean latency (`littles_law`), or as a
  server reported it when polled (`littles_law_polled`).

Requests that failed or returned no tokens are left out of every latency
statistic and of the throughputs' numerators (they count in `dur`), and are
counted by kind of failure (`RequestRecord.kind`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .percentiles import PERCENTILE_METHODS, Stats, bootstrap_percentiles, percentile, stats  # noqa: F401


@dataclass(frozen=True)
class RequestTimes:
    """One request: when it was sent, and when each of its output tokens (or chunks of them) arrived
    (seconds, one clock). `tokens` is how many output tokens it received, when a chunk may hold several
    (the server's `usage`); by default, one per arrival."""

    sent: float
    token_times: Sequence[float]
    tokens: int | None = None

    def __post_init__(self):
        times = tuple(float(t) for t in self.token_times)  # a list becomes an immutable tuple
        if not times:
            raise ValueError("A request with no output tokens has no TTFT, TPOT or E2E latency. Count it as "
                             "failed (or empty) instead of passing it here.")
        if times[0] < self.sent:
            raise ValueError(f"The first token arrived at {times[0]}, before the request was sent at {self.sent}: "
                             "the timestamps must come from one clock (time.perf_counter()).")
        if any(b < a for a, b in zip(times, times[1:])):
            raise ValueError("Token arrival times must not decrease: pass them in the order the tokens arrived.")
        if self.tokens is not None and self.tokens < len(times):
            raise ValueError(f"{len(times)} arrivals cannot carry only {self.tokens} tokens: every streamed chunk "
                             "holds at least one token. Pass the usage's completion_tokens as `tokens`.")
        object.__setattr__(self, "token_times", times)

    @property
    def n_tokens(self) -> int:
        """Output tokens received."""
        return len(self.token_times) if self.tokens is None else self.tokens

    @property
    def ttft(self) -> float:
        """Time to first token (s): first arrival − sent."""
        return self.token_times[0] - self.sent

    @property
    def e2e(self) -> float:
        """End-to-end latency (s): last arrival − sent."""
        return self.token_times[-1] - self.sent

    @property
    def tpot(self) -> float | None:
        """Time per output token (s): (E2E − TTFT) / (n − 1); None for a one-token answer."""
        if self.n_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.n_tokens - 1)

    @property
    def itl(self) -> list[float]:
        """Inter-token latencies (s): the gaps between successive arrivals (n − 1 of them when each arrival is
        one token)."""
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]


# --- a whole run --------------------------------------------------------------------------------

@dataclass(frozen=True)
class RequestRecord:
    """One request of a benchmark run, as a load generator records it.

    `sent`: when the request left the client; `token_times`: arrival of each streamed chunk that carried text;
    `input_tokens` and `output_tokens`: the server's `usage` (None when it sent none: then one token per chunk is
    assumed); `error`: why the request failed, "kind: detail" ("HTTP 502: ...", "timeout: ..."), or None;
    `ended`: when the client was done with it, answered, failed or given up on (None: at its last chunk, or
    at `sent` if none came; records written before it was kept);
    `queued`: how long it waited in the client for a free slot under a concurrency cap, between its arrival and
    `sent` (vLLM reports this apart, and, as here, leaves it out of TTFT and E2E); `turn`: its place in a
    multi-turn conversation (1, 2, ...), 0 for a request on its own.
    """

    sent: float
    token_times: Sequence[float] = ()
    input_tokens: int = 0
    output_tokens: int | None = None
    error: str | None = None
    queued: float = 0.0
    turn: int = 0
    ended: float | None = None

    @property
    def ok(self) -> bool:
        """Completed with at least one token: the requests every latency and throughput figure counts."""
        return (self.error is None and len(self.token_times) > 0
                and (self.output_tokens is None or self.output_tokens > 0))

    @property
    def end(self) -> float:
        """When the client was done with this request (`ended`, else its last chunk's arrival, else `sent`)."""
        if self.ended is not None:
            return self.ended
        return self.token_times[-1] if len(self.token_times) else self.sent

    @property
    def kind(self) -> str | None:
        """What kind of failure this was: `error` up to its first colon ("HTTP 502", "timeout"), "no tokens" for
        an answer without any, None for an `ok` request."""
        if self.ok:
            return None
        return self.error.split(":", 1)[0].strip() if self.error else "no tokens"

    @property
    def times(self) -> RequestTimes:
        """This request's latencies (only for an `ok` request)."""
        return RequestTimes(self.sent, self.token_times, self.output_tokens)


@dataclass(frozen=True)
class RunSummary:
    """What a benchmark run measured (seconds, and per second of `duration`, the run's wall time). The latency
    statistics (`ttft` ... `e2e`) cover the `completed` requests only; `errors` counts the others by kind
    (`RequestRecord.kind`), and `error_examples` gives the first error recorded of each kind, whole."""

    completed: int
    failed: int
    duration: float
    request_throughput: float
    output_throughput: float
    total_throughput: float
    ttft: Stats
    tpot: Stats | None
    itl: Stats | None
    e2e: Stats
    goodput: float | None = None
    errors: dict[str, int] = field(default_factory=dict)
    method: str = "linear"
    error_examples: dict[str, str] = field(default_factory=dict)


def summarize(records: Sequence[RequestRecord], objectives: Mapping[str, float] | None = None,
              method: str = "linear") -> RunSummary:
    """Summarise a run. `objectives` ({"ttft": s, "tpot": s, "e2e": s}, any subset) adds goodput: requests
    meeting every one of them, per second (a one-token request has no TPOT and meets a TPOT objective)."""
    if method not in PERCENTILE_METHODS:
        raise ValueError(f"Unknown percentile method {method!r}; choose from {list(PERCENTILE_METHODS)}.")
    unknown = set(objectives or {}) - {"ttft", "tpot", "e2e"}
    if unknown:
        raise ValueError(f"Unknown latency objective(s) {sorted(unknown)}; use ttft, tpot and e2e (seconds).")
    if not records:
        raise ValueError("The run holds no requests: there is nothing to summarise. Send some requests first.")
    done = [r for r in records if r.ok]
    errors, examples = failures(records)
    if not done:
        counted = ", ".join(f"{kind} {n}" for kind, n in errors.items())
        raise ValueError(f"None of the {len(records)} requests completed with a token ({counted}), so no latency "
                         "or throughput can be given. The first of the commonest kind: "
                         f"{next(iter(examples.values()))}")
    times = [r.times for r in done]
    duration = max(r.end for r in records) - min(r.sent for r in records)
    if duration <= 0:
        raise ValueError("The run took no time by its timestamps; they must come from one clock.")
    tpots = [t.tpot for t in times if t.tpot is not None]
    output = sum(t.n_tokens for t in times)
    goodput = None
    if objectives is not None:
        good = sum(all(_meets(t, metric, limit) for metric, limit in objectives.items()) for t in times)
        goodput = good / duration
    return RunSummary(
        completed=len(done), failed=len(records) - len(done), duration=duration,
        request_throughput=len(done) / duration, output_throughput=output / duration,
        total_throughput=(output + sum(r.input_tokens for r in done)) / duration,
        ttft=stats([t.ttft for t in times], method), tpot=stats(tpots, method),
        itl=stats([gap for t in times for gap in t.itl], method), e2e=stats([t.e2e for t in times], method),
        goodput=goodput, errors=errors, method=method, error_examples=examples)


def failures(records: Sequence[RequestRecord]) -> tuple[dict[str, int], dict[str, str]]:
    """The failed requests counted by kind (`RequestRecord.kind`), most common first, and the first reason
    recorded for each kind."""
    counts: dict[str, int] = {}
    examples: dict[str, str] = {}
    for r in records:
        if r.kind is not None:
            counts[r.kind] = counts.get(r.kind, 0) + 1
            examples.setdefault(r.kind, r.error or "no tokens: the server answered, but with no text")
    order = sorted(counts, key=lambda k: -counts[k])
    return {k: counts[k] for k in order}, {k: examples[k] for k in order}


def _meets(t: RequestTimes, metric: str, limit: float) -> bool:
    value = getattr(t, metric)
    return value is None or value <= limit


def littles_law(records: Sequence[RequestRecord], start: float | None = None,
                end: float | None = None) -> tuple[float, float]:
    """(L, λ·W) over the window [start, end] (default: the whole run): L is the mean number of completed
    requests in flight, integrated from their timestamps; λ is the rate at which they were sent in the window
    and W the mean E2E latency of those sent in it.

    Over the whole run the two are equal by construction (both are total time in flight ÷ duration). Over a
    window inside a run they agree only if the system is stable: when a queue keeps growing, the requests
    sent in the window stay in flight long after it, and the two part.
    """
    spans = _spans(records)
    start = min(s for s, _ in spans) if start is None else start
    end = max(e for _, e in spans) if end is None else end
    if end <= start:
        raise ValueError(f"The window [{start}, {end}] is empty: end must come after start.")
    in_flight = sum(max(0.0, min(e, end) - max(s, start)) for s, e in spans) / (end - start)
    arrived = [e - s for s, e in spans if start <= s < end]
    if not arrived:
        raise ValueError("No request was sent inside the window; widen it.")
    return in_flight, len(arrived) / (end - start) * (sum(arrived) / len(arrived))


def _spans(records: Sequence[RequestRecord]) -> list[tuple[float, float]]:
    """(sent, last token) of every completed request."""
    spans = [(r.sent, r.token_times[-1]) for r in records if r.ok]
    if not spans:
        raise ValueError("Little's Law needs completed requests; none completed.")
    return spans


def littles_law_polled(records: Sequence[RequestRecord], polled: Sequence[tuple[float, float]]
                       ) -> tuple[float, float]:
    """(L, λ·W) over a whole run, with L as the server counted it: the time average (`time_average`) of its
    polled count of requests in flight, (time, count) pairs, from the first request sent to the last token
    received; λ·W from the client's timestamps, as `littles_law` computes it. Unlike `littles_law`'s own L,
    this one is measured apart from the latencies, so the two agreeing is a check, not an identity."""
    spans = _spans(records)
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    return time_average(polled, start, end), littles_law(records)[1]


def time_average(samples: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """The mean over [start, end] of a quantity sampled as (time, value) pairs in time order, each value held
    until the next sample (a step function): e.g. the requests in flight that a server reported when polled.

    Time before the first sample is left out (the mean is over [max(start, first sample), end]); the last
    sample holds until `end`.
    """
    inside = [(t, v) for t, v in samples if t < end]
    if not inside:
        raise ValueError("No sample was taken before the window's end: poll while the run is going.")
    if any(b[0] < a[0] for a, b in zip(inside, inside[1:])):
        raise ValueError("The samples must be in time order.")
    total, covered = 0.0, 0.0
    for (t, v), (t_next, _) in zip(inside, inside[1:] + [(end, None)]):
        span = min(t_next, end) - max(t, start)
        if span > 0:
            total, covered = total + v * span, covered + span
    if covered <= 0:
        raise ValueError(f"The samples do not cover any of the window [{start}, {end}].")
    return total / covered


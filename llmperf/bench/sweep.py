"""Sweeps: one server loaded at a series of loads, from one request at a time up to all it can take.

A single run answers "what did users see at this load". A sweep answers what an operator asks: how much can
this server take, where does adding load stop paying, and what is the most it can serve within its latency
objectives. Two kinds, as the peers offer them:

- by rate (guidellm's `sweep` profile): first one request at a time (the synchronous point: the latency of a
  lone request, and the throughput of no batching), then every request at once (the throughput point: the
  most the server completes per second, its capacity, with latencies as bad as they get), then `steps` rates
  spread evenly between the two, each an open loop with Poisson arrivals (`load.run`), their gaps scaled so
  that each point's requests arrive at exactly the rate it names (`load.arrival_gaps(exact=True)`);
- by concurrency (AIPerf's and vLLM's sweeps over `--max-concurrency`): a closed loop at each count of clients.

Every point runs the same requests. Three readings come from the points (`Sweep`):

- capacity: the highest request throughput any point measured (requests completed ÷ the point's duration);
- the knee: the point where more load stops buying throughput and starts buying latency. It is found as
  Kneedle finds a knee (Satopää et al., 2011): with output tokens/s on x and median E2E on y, each scaled to
  0..1 over the sweep, the point farthest below the straight line from the lightest load to the heaviest
  (the largest x − y);
- the highest load meeting the objectives: DistServe's goodput (Zhong et al., 2024), the highest rate at which
  at least `target` of the requests (90 % by default; a failed request misses) meet every latency objective.
  The sweep measures it at its own points; the rate between the last point that met them and the first that
  did not is not searched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..metrics import RequestRecord, RunSummary, summarize
from .load import achieved_rate, run

KINDS = ("rate", "concurrency")
CONCURRENCIES = (1, 2, 4, 8, 16)  # a concurrency sweep's default client counts


def describe(label: str, rate: float | None, concurrency: int | None) -> str:
    """A point's load as a reader names it: "1 at a time", "4 clients", "2.5 req/s", "all at once, at most 8"."""
    if label == "synchronous":
        return "1 at a time"
    if rate is None:
        return f"{concurrency} client{'s' if concurrency > 1 else ''}"
    cap = f", at most {concurrency}" if concurrency else ""
    return ("all at once" if math.isinf(rate) else f"{rate:.3g} req/s") + cap


@dataclass
class Point:
    """One run of a sweep: how it loaded the server (`rate` in requests/s, inf for all at once; `concurrency`
    clients or, with a rate, the cap on requests in flight) and every request's record."""

    label: str  # "synchronous", "throughput", "rate" or "concurrency"
    rate: float | None
    concurrency: int | None
    records: list[RequestRecord]
    objectives: Mapping[str, float] | None = None
    method: str = "linear"
    summary: RunSummary = field(init=False)

    def __post_init__(self):
        self.summary = summarize(self.records, self.objectives, self.method)

    @property
    def load(self) -> str:
        """The load as a reader names it (`describe`)."""
        return describe(self.label, self.rate, self.concurrency)

    @property
    def attainment(self) -> float | None:
        """The share of the point's requests (failed ones included, as misses) that met every objective."""
        if self.summary.goodput is None:
            return None
        met = round(self.summary.goodput * self.summary.duration)
        return met / (self.summary.completed + self.summary.failed)

    def row(self) -> dict:
        """The point as a table row: the load, the rate the requests arrived at, what was served, latencies (ms)."""
        s = self.summary
        return {"load": self.load, "arrived (req/s)": achieved_rate(self.records),
                "served (req/s)": s.request_throughput, "output (tokens/s)": s.output_throughput,
                "TTFT p50 (ms)": s.ttft.median * 1e3, "TTFT p99 (ms)": s.ttft.p99 * 1e3,
                "TPOT p50 (ms)": s.tpot.median * 1e3 if s.tpot else None,
                "TPOT p99 (ms)": s.tpot.p99 * 1e3 if s.tpot else None,
                "E2E p50 (ms)": s.e2e.median * 1e3, "failed": s.failed,
                **({"met objectives (%)": 100 * self.attainment} if self.attainment is not None else {})}


@dataclass
class Sweep:
    """A sweep's points, lightest load first, and its readings (the module's docstring)."""

    kind: str
    points: list[Point]
    objectives: Mapping[str, float] | None = None
    target: float = 0.9

    @property
    def capacity(self) -> Point:
        """The point that completed the most requests per second."""
        return max(self.points, key=lambda p: p.summary.request_throughput)

    @property
    def knee(self) -> Point | None:
        """The point farthest below the line from the lightest load to the heaviest, with output tokens/s and
        median E2E each scaled to 0..1 (Kneedle); None for fewer than three points or a flat curve."""
        if len(self.points) < 3:
            return None
        xs = [p.summary.output_throughput for p in self.points]
        ys = [p.summary.e2e.median for p in self.points]
        if max(xs) == min(xs) or max(ys) == min(ys):
            return None
        scaled = [(x - min(xs)) / (max(xs) - min(xs)) - (y - min(ys)) / (max(ys) - min(ys)) for x, y in zip(xs, ys)]
        return self.points[max(range(len(scaled)), key=scaled.__getitem__)]

    @property
    def best(self) -> Point | None:
        """The heaviest load at which at least `target` of the requests met every objective; None if none did
        (or no objectives were given)."""
        meeting = [p for p in self.points if p.attainment is not None and p.attainment >= self.target]
        return meeting[-1] if meeting else None

    def rows(self) -> list[dict]:
        return [p.row() for p in self.points]

    def report(self) -> str:
        """The sweep as text: a table of its points, then its capacity, its knee and the heaviest load that met
        the objectives, each said from the numbers."""
        rows = self.rows()
        heads = list(rows[0])
        cells = [[_cell(r.get(h)) for h in heads] for r in rows]
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
        lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths))]
        lines += ["  ".join(c.rjust(w) for c, w in zip(cell, widths)) for cell in cells]
        top = self.capacity.summary
        lines.append(f"capacity: {top.request_throughput:.3g} requests/s, {top.output_throughput:.4g} output "
                     f"tokens/s (at {self.capacity.load})")
        knee = self.knee
        lines.append(f"knee: {knee.load}, {knee.summary.output_throughput:.4g} tokens/s at a median E2E of "
                     f"{knee.summary.e2e.median * 1e3:.0f} ms" if knee else
                     "knee: none (it needs three points and a curve that is not flat)")
        if self.objectives:
            said = ", ".join(f"{k.upper()} ≤ {v * 1e3:.4g} ms" for k, v in self.objectives.items())
            best = self.best
            lines.append(f"objectives ({said}) met by {self.target:.0%} of requests: " + (
                f"at most at {best.load} ({best.summary.request_throughput:.3g} requests/s served)" if best else
                "at no load of the sweep (even the lightest missed them)"))
        return "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.3g}" if value < 100 else f"{value:,.0f}"
    return str(value)


async def sweep(url: str, model: str, prompts: Sequence, max_tokens: "int | Sequence[int]", kind: str = "rate",
                values: Sequence[float] | None = None, steps: int = 4, concurrency: int | None = None,
                objectives: Mapping[str, float] | None = None, target: float = 0.9, method: str = "linear",
                on_point: Callable[[Point], None] | None = None, **options) -> Sweep:
    """Run a sweep of `kind` ("rate" or "concurrency") and return it. By rate: the synchronous point, the
    throughput point (all at once, under `concurrency` if given), then `steps` rates evenly between their
    request throughputs (none if all at once served no more requests/s than one at a time); or, with `values`, those rates (requests/s), each under `concurrency` if given. By
    concurrency: a closed loop at each of `values` (default `CONCURRENCIES`). Each point sends every prompt
    (with `max_tokens`, as `load.run`); `options` go to `load.run` (burstiness, duration, chat, timeout, seed,
    warmups: sent once, before the first point, ignore_eos, show_progress). `on_point` is called as each point
    ends. The points are returned lightest load first."""
    if kind not in KINDS:
        raise ValueError(f"A sweep is by {' or by '.join(KINDS)}, not {kind!r}.")
    if steps < 0 or (values is not None and (not values or any(not v > 0 for v in values))):
        raise ValueError(f"Need steps >= 0 and values > 0; got steps {steps} and values {values}.")
    if kind == "concurrency" and any(v != int(v) for v in values or ()):
        raise ValueError(f"A concurrency sweep counts clients: whole numbers, got {values}.")
    if not 0 < target <= 1:
        raise ValueError(f"target is the share of requests that must meet the objectives, in (0, 1]; got {target}.")
    warmups = options.pop("warmups", 0)
    points: list[Point] = []

    async def measure(label: str, rate: float | None, cap: int | None) -> Point:
        nonlocal warmups
        records = await run(url, model, prompts, max_tokens, rate=rate, concurrency=cap, warmups=warmups,
                            label=describe(label, rate, cap), exact_rate=True, **options)
        warmups = 0  # only before the first point
        point = Point(label, rate, cap, records, objectives, method)
        points.append(point)
        if on_point is not None:
            on_point(point)
        return point

    if kind == "concurrency":
        for c in sorted(int(v) for v in values or CONCURRENCIES):
            await measure("concurrency", None, c)
    elif values is not None:
        for r in sorted(values):
            await measure("rate", r, concurrency)
    else:
        low = (await measure("synchronous", None, 1)).summary.request_throughput
        high = (await measure("throughput", math.inf, concurrency)).summary.request_throughput
        for i in range(1, steps + 1):
            if high > low:
                await measure("rate", low + (high - low) * i / (steps + 1), concurrency)
        points.sort(key=lambda p: (p.label == "throughput", p.label != "synchronous", p.rate or 0))
    return Sweep(kind, points, objectives, target)

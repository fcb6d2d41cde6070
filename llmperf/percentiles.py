"""Percentiles of a run's latencies, and how much to trust them: pure arithmetic on lists of seconds (no torch).

Two methods, named as the benchmarks name them: "linear" interpolates between the two nearest values (NumPy's
default, vLLM's benchmark); "nearest_rank" takes the smallest value with at least q % of the values at or below
it (MLPerf). `bootstrap_percentiles` says how far a percentile would move in a repeated run, by resampling the
run; `stats` is the mean, median, p90 and p99 that `metrics.summarize` reports for each latency.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PERCENTILE_METHODS = {"linear": "linear", "nearest_rank": "inverted_cdf"}  # our name -> numpy's


def percentile(values: Sequence[float], q: float, method: str = "linear") -> float:
    """The q-th percentile (0-100) of `values`: "linear" interpolates (NumPy's default, vLLM), "nearest_rank"
    is the smallest value with at least q % of the values at or below it (MLPerf)."""
    if method not in PERCENTILE_METHODS:
        raise ValueError(f"Unknown percentile method {method!r}; choose from {list(PERCENTILE_METHODS)}.")
    if not 0 <= q <= 100:
        raise ValueError(f"A percentile is between 0 and 100, got {q}.")
    if len(values) == 0:
        raise ValueError("No values to take a percentile of.")
    return float(np.percentile(np.asarray(values, dtype=float), q, method=PERCENTILE_METHODS[method]))


def bootstrap_percentiles(values: Sequence[float], qs: Sequence[float] = (50, 99), resamples: int = 2000,
                          coverage: float = 90, seed: int = 0) -> dict[float, tuple[float, float]]:
    """How far each q-th percentile (interpolated) of `values` would move if the run were repeated: draw
    `resamples` reruns of it by resampling its values with replacement (seeded), take the percentile of each,
    and return, per q, the (low, high) range holding the middle `coverage` % of them."""
    if len(values) == 0:
        raise ValueError("No values to resample.")
    if not 0 < coverage < 100:
        raise ValueError(f"coverage is a share of the reruns between 0 and 100 %, got {coverage}.")
    rng = np.random.default_rng(seed)
    reruns = rng.choice(np.asarray(values, dtype=float), size=(resamples, len(values)))  # one rerun per row
    tail = (100 - coverage) / 2
    ranges = {}
    for q in qs:
        low, high = np.percentile(np.percentile(reruns, q, axis=1), [tail, 100 - tail])
        ranges[q] = (float(low), float(high))
    return ranges


@dataclass(frozen=True)
class Stats:
    """Mean, median, p90 and p99 of one metric (seconds), and how many values they summarise."""

    mean: float
    median: float
    p90: float
    p99: float
    count: int


def stats(values: Sequence[float], method: str = "linear") -> Stats | None:
    """The summary statistics of `values`, or None when there are none (e.g. TPOT when every answer was one
    token long)."""
    if len(values) == 0:
        return None
    return Stats(float(np.mean(values)), *(percentile(values, q, method) for q in (50, 90, 99)), len(values))

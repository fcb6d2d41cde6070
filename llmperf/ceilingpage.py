"""The client-ceiling benchmark (benchmarks/client_ceiling.py) on the benchmarks page: its table and sentence.

A row per worker count: the ceiling, the highest request rate at which `llmperf.bench`'s TTFT stayed within the
run's limit of the stub's truth on the mean (the median over the run's climbs, with their range), the chunks
per second streamed at it, and the mean TTFT error there. The sentence compares the most workers' ceiling with
one worker's. No torch.
"""

from __future__ import annotations

from .wording import SAME, times

NONE = "—"


def _number(value, digits: int) -> str:
    return NONE if not isinstance(value, (int, float)) or isinstance(value, bool) else f"{value:,.{digits}f}"


def ceiling_table(results: dict):
    """The rows as a DataFrame indexed by workers."""
    import pandas as pd

    limit = results.get("error_limit_ms", 5)
    rows = [{"workers": r["workers"], "ceiling (req/s)": _number(r.get("ceiling_rate"), 0),
             "climbs' range (req/s)": (f"{r['ceiling_rate_min']:,.0f} to {r['ceiling_rate_max']:,.0f}"
                                       if r.get("ceiling_rate_min") is not None else NONE),
             "chunks/s": _number(r.get("chunks_per_s"), 0),
             f"mean TTFT error (ms, limit {limit:g})": _number(r.get("ttft_error_mean_ms"), 2)}
            for r in results["rows"]]
    return pd.DataFrame(rows).set_index("workers")


def ceiling_sentence(results: dict) -> str:
    """How the ceiling moved from one worker to the most workers measured."""
    rows = sorted((r for r in results["rows"] if r.get("ceiling_rate")), key=lambda r: r["workers"])
    if not rows:
        return "No load passed: the client's TTFT was off by more than the limit at the lowest rate tried."
    one, most = rows[0], rows[-1]
    said = (f"One client process kept its TTFT within {results.get('error_limit_ms', 5):g} ms of the truth up to "
            f"{one['ceiling_rate']:,.0f} requests/s ({one['chunks_per_s']:,.0f} chunks/s)"
            if one["workers"] == 1 else f"{one['workers']} workers reached {one['ceiling_rate']:,.0f} requests/s")
    if most is one:
        return said + "."
    ratio, top = most["ceiling_rate"] / one["ceiling_rate"], f"{most['ceiling_rate']:,.0f} requests/s"
    moved = (f"stayed about the same ({top})" if abs(ratio - 1) <= SAME else
             f"rose {times(ratio)}, to {top}" if ratio > 1 else f"fell to {ratio:.2f} times that, {top}")
    said = f"{said}; with {most['workers']} worker processes the ceiling {moved}"
    lows, highs = (one.get("ceiling_rate_min"), one.get("ceiling_rate_max")), (
        most.get("ceiling_rate_min"), most.get("ceiling_rate_max"))
    if None not in lows + highs and highs[0] <= lows[1] and highs[1] >= lows[0]:
        said += (f", though single climbs overlapped ({lows[0]:,.0f} to {lows[1]:,.0f} requests/s against "
                 f"{highs[0]:,.0f} to {highs[1]:,.0f}): the stub and the workers share the cores")
    return said + "."

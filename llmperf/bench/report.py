"""A run reported: its summary as a table of text (`format_summary`, what `python -m llmperf.bench` prints) and
its figure (`--plot FILE`): what its requests saw, in the book's style.

A run: three panels, from the successful requests' records: the distribution (empirical CDF) of TTFT and of
TPOT, each with its median and p99 marked as the summary computes them, and a histogram of every gap between two
streamed chunks (ITL), where stalls show as a tail.

A sweep (`--sweep`): the exchange-rate curve, latency against the output tokens/s each point served: TTFT, TPOT
and E2E, each at p50 and p99, with the sweep's capacity as a vertical line and its knee circled.

Latency objectives given to the command are drawn as red lines. The format follows the file's suffix (.png,
.svg, .pdf).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..metrics import RequestRecord, RunSummary
from .sweep import Sweep

MS = 1e3  # seconds to milliseconds


def format_summary(s: RunSummary) -> str:
    """The run as a table: counts (failures by kind, with the first reason given for each) and throughputs over
    the run's wall time, then mean, median, p90 and p99 of each latency of the successful requests, in ms."""
    kinds = ", ".join(f"{kind} {n}" for kind, n in s.errors.items())
    lines = [f"completed {s.completed}, failed {s.failed}" + (f" ({kinds})" if kinds else "")]
    lines += [f"  e.g. {error}" for error in s.error_examples.values()]
    lines += [f"duration {s.duration:.2f} s (wall time: first request sent to last ended, failed ones included)",
             f"request throughput  {s.request_throughput:10.2f} req/s",
             f"output throughput   {s.output_throughput:10.1f} tokens/s",
             f"total throughput    {s.total_throughput:10.1f} tokens/s (input + output)"]
    if s.goodput is not None:
        lines.append(f"goodput             {s.goodput:10.2f} req/s meeting every objective")
    lines.append(f"\n{'ms':<6} {'mean':>9} {'median':>9} {'p90':>9} {'p99':>9} {'n':>7}   (the {s.completed} "
                 f"successful requests; percentiles: {s.method})")
    for name, st in (("TTFT", s.ttft), ("TPOT", s.tpot), ("ITL", s.itl), ("E2E", s.e2e)):
        if st is None:
            lines.append(f"{name:<6} {'(none)':>9}")
            continue
        lines.append(f"{name:<6} {st.mean * 1e3:>9.2f} {st.median * 1e3:>9.2f} {st.p90 * 1e3:>9.2f} "
                     f"{st.p99 * 1e3:>9.2f} {st.count:>7}")
    return "\n".join(lines)


def run_figure(records: Sequence[RequestRecord], title: str, objectives: Mapping[str, float] | None = None,
               method: str = "linear"):
    """The figure of a run's `records` (see the module's docstring); `objectives` in seconds, as `summarize`
    takes them. ValueError if no request succeeded."""
    from .. import plots

    ok = [r for r in records if r.ok]
    if not ok:
        raise ValueError("No request succeeded, so there is nothing to draw.")
    fig, (ttft_ax, tpot_ax, itl_ax) = plots.figure(panels=3, height=2.6)
    series = {"TTFT": [r.times.ttft * MS for r in ok],
              "TPOT": [r.times.tpot * MS for r in ok if r.times.n_tokens > 1]}
    for (name, values), ax in zip(series.items(), (ttft_ax, tpot_ax)):
        if values:
            plots.cdf(ax, values, f"{name} of {len(values)} requests", name, "ms", (50, 99), method, digits=1)
        else:
            ax.text(0.5, 0.5, f"no {name}: every answer had one token", ha="center", transform=ax.transAxes)
        if objectives and name.lower() in objectives:
            limit = objectives[name.lower()] * MS
            ax.axvline(limit, color=plots.PREDICTED, lw=1.5, label=f"objective {limit:g} ms")
        ax.legend(loc="lower right", fontsize=7)
    gaps = [g * MS for r in ok for g in r.times.itl]
    if gaps:
        itl_ax.hist(gaps, bins=40, color=plots.MEASURED)
        itl_ax.set_yscale("log")
    itl_ax.set_xlabel("gap between two chunks, ITL (ms)")
    itl_ax.set_ylabel("gaps")
    fig.suptitle(title, fontsize=10)
    return fig


def sweep_figure(sweep: Sweep, title: str):
    """The figure of a sweep (see the module's docstring): one panel per latency, a point per load."""
    from .. import plots

    fig, axes = plots.figure(panels=3, height=2.6)
    xs = [p.summary.output_throughput for p in sweep.points]
    knee, top = sweep.knee, sweep.capacity
    for ax, name in zip(axes, ("ttft", "tpot", "e2e")):
        stats = [getattr(p.summary, name) for p in sweep.points]
        for q, style, color in (("median", "o-", plots.MEASURED), ("p99", "s--", plots.PALETTE[3])):
            pairs = [(x, getattr(st, q) * MS) for x, st in zip(xs, stats) if st is not None]
            if pairs:
                ax.plot(*zip(*pairs), style, ms=4, lw=1, color=color, label=f"{'p50' if q == 'median' else q}")
        if knee is not None and getattr(knee.summary, name) is not None:
            ax.plot(knee.summary.output_throughput, getattr(knee.summary, name).median * MS, "o", ms=11,
                    mfc="none", color=plots.PALETTE[2], label=f"knee ({knee.load})")
        ax.axvline(top.summary.output_throughput, color=plots.FIT, ls=":", lw=1, label="capacity")
        if sweep.objectives and name in sweep.objectives:
            ax.axhline(sweep.objectives[name] * MS, color=plots.PREDICTED, lw=1.5, label="objective")
        ax.set_xlabel("output tokens/s served")
        ax.set_ylabel(f"{name.upper()} (ms)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig


def save(records: "Sequence[RequestRecord] | Sweep", path: str, title: str,
         objectives: Mapping[str, float] | None = None, method: str = "linear") -> None:
    """Draw `run_figure` (or, for a sweep, `sweep_figure`) and write it to `path`."""
    import matplotlib.pyplot as plt

    fig = (sweep_figure(records, title) if isinstance(records, Sweep)
           else run_figure(records, title, objectives, method))
    try:
        fig.savefig(path)
    finally:
        plt.close(fig)

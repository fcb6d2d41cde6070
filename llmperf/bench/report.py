"""A run's figure (`python -m llmperf.bench ... --plot FILE`): what its requests saw, in the book's style.

Three panels, from the successful requests' records: the distribution (empirical CDF) of TTFT and of TPOT, each
with its median and p99 marked as the summary computes them, and a histogram of every gap between two streamed
chunks (ITL), where stalls show as a tail. Latency objectives given to the command are drawn as red lines. The
format follows the file's suffix (.png, .svg, .pdf).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..metrics import RequestRecord

MS = 1e3  # seconds to milliseconds


def run_figure(records: Sequence[RequestRecord], title: str, objectives: Mapping[str, float] | None = None,
               method: str = "linear"):
    """The figure of a run's `records` (see the module's docstring); `objectives` in seconds, as `summarize`
    takes them. ValueError if no request succeeded."""
    from .. import plots

    ok = [r for r in records if r.ok]
    if not ok:
        raise ValueError("No request succeeded, so there is nothing to draw.")
    fig, (ttft_ax, tpot_ax, itl_ax) = plots.figure(ncols=3, height=3.6)
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


def save(records: Sequence[RequestRecord], path: str, title: str, objectives: Mapping[str, float] | None = None,
         method: str = "linear") -> None:
    """Draw `run_figure` and write it to `path`."""
    import matplotlib.pyplot as plt

    fig = run_figure(records, title, objectives, method)
    try:
        fig.savefig(path)
    finally:
        plt.close(fig)

"""Chapter 3's figures, drawn from its records (`llmperf.chapters.intensity`); nothing here measures."""

from __future__ import annotations

import dataclasses

import matplotlib.ticker as ticker

from .. import hardware
from . import MEASURED, PREDICTED, REFERENCE_COLORS, figure, log2_axis, reference_series
from . import roofline as draw_roofline


def _log2_batches(ax, batches) -> None:
    log2_axis(ax, batches, "batch size B (sequences)")
    ax.legend()


def batch_sweep(sweep, others=None):
    """Above, one decode step's time against batch size; below, the tokens per second it yields (log scale):
    measured, bytes ÷ bandwidth, and the roofline part by part. `sweep`: a BatchSweep; `others` (a
    references.compare.Comparison) adds each reference's tokens/s below."""
    fig, (ax, ax2) = figure(panels=2)
    b = sweep.batches
    ax.plot(b, [t * 1e3 for t in sweep.bandwidth_s], "-", color=PREDICTED, label="bytes ÷ bandwidth (predicted)")
    ax.plot(b, [t * 1e3 for t in sweep.roof_s], "--", color=PREDICTED, label="roofline, part by part (predicted)")
    ax.plot(b, [t * 1e3 for t in sweep.step_s], "o-", color=MEASURED, label="measured (median)")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("time of one decode step (ms)")
    ax.set_title(f"SmolLM2-135M, {sweep.context} cached tokens, {sweep.device_type}")
    ax2.plot(b, [n / t for n, t in zip(b, sweep.bandwidth_s)], "-", color=PREDICTED, label="bandwidth-bound prediction")
    ax2.plot(b, [n / t for n, t in zip(b, sweep.roof_s)], "--", color=PREDICTED, label="roofline prediction")
    ax2.plot(b, sweep.tokens_per_s, "o-", color=MEASURED, label="measured")
    ax2.set_yscale("log")
    ax2.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax2.set_ylabel("throughput (tokens/s)")
    ax2.set_title("tokens per second across the batch")
    for a in (ax, ax2):
        _log2_batches(a, b)
    if reference_series(ax2, others, "batch_sweep"):
        _log2_batches(ax2, sorted({*b, *(x for _, xs, _ in others.series("batch_sweep") for x in xs)}))
    return fig


def _label_batches(ax, batches, x, y, offset=(4, 4)) -> None:
    """"B=…" beside each point; where two points lie within a few pixels of each other, the second's label goes
    to the other side of its point, so that no two labels overlap."""
    ax.figure.canvas.draw_idle()
    last = None
    for b, xi, yi in zip(batches, x, y):
        at = ax.transData.transform((xi, yi))
        close = last is not None and abs(at[0] - last[0]) < 30 and abs(at[1] - last[1]) < 14
        dx, dy = offset if not close else (-offset[0] - 26, -offset[1] if offset[1] else 10)
        ax.annotate(f"B={b}", (xi, yi), textcoords="offset points", xytext=(dx, dy), fontsize=8)
        last = None if close else at


def latency_throughput(sweep, predicted):
    """Each user's tokens/s against all users' together, one point per batch size: above, this machine's batch
    sweep (a BatchSweep), measured; below, Llama-3-8B predicted part by part (a LatencyThroughput)."""
    fig, (ax, ax2) = figure(panels=2)
    ax.plot(sweep.tokens_per_s, [1 / t for t in sweep.step_s], "o-", color=MEASURED, label="measured")
    _label_batches(ax, sweep.batches, sweep.tokens_per_s, [1 / t for t in sweep.step_s])
    ax.set_title(f"SmolLM2-135M, {sweep.device_type}, measured")
    p = predicted
    ax2.plot([b / t for b, t in zip(p.batches, p.step_s)], [1 / t for t in p.step_s], "-", color=PREDICTED,
             label="predicted (roofline, part by part)")
    ends = [0, len(p.batches) - 1]  # batch 1 and the most users that fit
    _label_batches(ax2, [p.batches[i] for i in ends], [p.batches[i] / p.step_s[i] for i in ends],
                   [1 / p.step_s[i] for i in ends])
    ax2.set_title(f"Llama-3-8B on an {p.device}, {p.context:,} tokens of context")
    for a in (ax, ax2):
        a.set_xlabel("all users together (tokens/s)")
        a.set_ylabel("each user (tokens/s)")
        a.set_ylim(bottom=0)
        a.legend()
    return fig


def roofline(roofs, sweep, others=None):
    """The roofs of the table's accelerators and of this machine (a Roofs), the batch sweep's measured steps
    (a BatchSweep) at their intensity and achieved FLOP rate, and the Llama-3-8B step's intensity at batch 1;
    and each committed reference's probed roof and measured steps (`others`, a references.compare.Comparison)."""
    fig, ax = figure(height=6.4)
    here_label = f"{roofs.label} (measured)"
    h100_label = f"{roofs.h100.name}, datasheet (predicted)"
    table = [dataclasses.replace(hw, name=h100_label) if name == roofs.h100.name else hw
             for name, hw in hardware.ACCELERATORS.items()]
    draw_roofline(ax, [*table, dataclasses.replace(roofs.here, name=here_label)],
                  highlight={h100_label: PREDICTED, roofs.h200.name: "tab:green", here_label: MEASURED})
    achieved = [f / t for f, t in zip(sweep.nflops, sweep.step_s)]
    ax.plot(sweep.intensity, achieved, "o", color=MEASURED, ms=7, zorder=5, label="SmolLM2 decode step, measured")
    _label_batches(ax, sweep.batches, sweep.intensity, achieved, offset=(4, -11))
    _reference_roofs(ax, others)
    # at the exact count's intensity: the products that run, over the bytes the step reads
    ax.axvline(roofs.intensity_exact, color=PREDICTED, ls=":", label="Llama-3-8B decode, batch 1 (predicted)")
    ax.set_title("Roofline: table accelerators, this machine, and the measured decode step")
    _legend_below(ax)
    return fig


def _legend_below(ax) -> None:
    """The roofline's legend under its axes (the figure makes room for it), so that the plot keeps the figure's
    width."""
    if ax.get_legend() is not None:
        ax.get_legend().remove()
    ax.figure.legend(*ax.get_legend_handles_labels(), fontsize=8, loc="outside lower center", ncols=1)


def _reference_roofs(ax, others) -> None:
    """Each reference's probed roof (thin, dashed) and its batch sweep's steps at their intensity and rate."""
    if others is None:
        return
    import numpy as np

    from ..references.compare import positive

    x = np.logspace(-1, 4, 200)
    drawn = 0
    for ref in others.refs:
        flops, bandwidth = ref.results.get("roof_flops"), ref.results.get("roof_bandwidth")
        if positive(flops) and positive(bandwidth):
            dtype = ref.results.get("roof_dtype")
            ax.plot(x, np.minimum(flops, x * bandwidth), "--", color=REFERENCE_COLORS[drawn % len(REFERENCE_COLORS)],
                    lw=1.2, label=f"{ref.label}, probed roof" + (f" ({dtype})" if isinstance(dtype, str) else ""))
            drawn += 1
    reference_series(ax, others, "roofline", suffix=", measured steps")


def context_sweep(sweep, others=None):
    """Growth relative to the shortest context, log–log: the context itself, the bytes model's predicted TPOT
    and the measured TPOT. `sweep`: a ContextSweep; `others` (a references.compare.Comparison) adds each
    reference's measured growth."""
    fig, ax = figure()
    c = sweep.contexts
    ax.plot(c, [x / c[0] for x in c], ":", color="k", label="context length (relative)")
    ax.plot(c, sweep.predicted_growth, "-", color=PREDICTED, label="bytes moved (predicted TPOT growth)")
    ax.plot(c, sweep.measured_growth, "o-", color=MEASURED, label="measured TPOT (median)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(c, [f"{x:,}" for x in c])
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel(f"relative to {c[0]} tokens (×)")
    ax.set_title(f"SmolLM2-135M decode step against context, batch {sweep.batch}, {sweep.device_type}")
    ax.legend()
    if reference_series(ax, others, "context_sweep", relative=True, suffix=" tokens, measured TPOT"):
        ax.set_xticks(sorted({*c, *(x for _, xs, _ in others.series("context_sweep") for x in xs)}))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    return fig

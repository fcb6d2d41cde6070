"""One figure style for the whole book, the few plot types it uses (fits, rooflines), and each chapter's figures
(one module per chapter, named as in `llmperf.chapters`: `plots.chain`, `plots.prefill`, ...).

Every figure: labelled axes with units, a light grid, no top/right spines,
measurements as markers, predictions and fits as lines.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import matplotlib.ticker as ticker

MEASURED = "#1f4e79"   # dark blue: what this machine did
PREDICTED = "#c0504d"  # brick red: what the cost model says
FIT = "#7f7f7f"        # grey: curves fitted to the measurements
PALETTE = [MEASURED, PREDICTED, "#4f9a5a", "#e39b2b", "#7b5ea7", FIT]

STYLE = {
    "figure.figsize": (6.4, 3.8),
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "axes.prop_cycle": plt.cycler(color=PALETTE),
}


def use_style() -> None:
    """Apply the book's style to every figure made afterwards."""
    plt.rcParams.update(STYLE)


def figure(panels: int = 1, width: float | None = None, height: float | None = None):
    """A new figure in the book's style: (fig, ax), or (fig, [ax, ...]) for `panels` > 1, stacked one above
    the other, so that each panel keeps the page's full width and its text stays legible. `height` is each
    panel's."""
    use_style()
    w, h = STYLE["figure.figsize"]
    fig, axes = plt.subplots(panels, 1, figsize=(width or w, (height or h) * panels), layout="constrained")
    return fig, axes


METHOD_WORDS = {"linear": "interpolated", "nearest_rank": "nearest rank"}  # a percentile method, as a legend says it


def cdf(ax, values, label: str, what: str, unit: str = "ms", percentiles=(50, 90, 99), method: str = "linear",
        digits: int = 0) -> None:
    """On `ax`: the empirical CDF (a step) of `values` (of `what`, in `unit`), and a dashed vertical at each of
    `percentiles`, labelled with its value and its method, computed by `metrics.percentile` with `method`."""
    from ..metrics import percentile

    values = sorted(values)
    n = len(values)
    ax.step([values[0], *values], [0, *(i / n for i in range(1, n + 1))], where="post", color=MEASURED,
            label=label)
    words = METHOD_WORDS.get(method, method)  # an unknown method: metrics.percentile says so below
    for q, color in zip(percentiles, PALETTE[2:] + PALETTE[:1]):
        value = percentile(values, q, method)
        ax.axvline(value, color=color, ls="--", lw=1, label=f"p{q:g} = {value:,.{digits}f} {unit} ({words})")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel(f"{what} ({unit})")
    ax.set_ylabel(f"share of requests with {what} ≤ x")


def log2_axis(ax, values, label: str) -> None:
    """A base-2 logarithmic x axis with a tick at each of `values` (batch sizes), labelled `label`."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(values, [str(v) for v in values])
    ax.set_xlabel(label)


def measured_vs_line(ax, x, y, line_x, line_y, *, measured_label: str, line_label: str,
                     xlabel: str, ylabel: str, title: str | None = None, line_color: str = FIT):
    """Measured points and a predicted or fitted curve on one axis."""
    ax.plot(line_x, line_y, "-", color=line_color, label=line_label, zorder=1)
    ax.plot(x, y, "o", color=MEASURED, label=measured_label, zorder=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend()
    return ax


def roofline(ax, devices, highlight: dict | None = None, intensity=(0.1, 1e4)):
    """Each device's roof, min(peak FLOP/s, intensity × bandwidth), on log–log axes.

    `devices` are hardware.Accelerator rows (the table's, or probe()'s). Devices named
    in `highlight` ({name: colour}) are drawn bold in that colour and named in the legend;
    the rest thin and grey, under one legend entry.
    Measured points can then be added with ax.plot(flops / bytes, flops / seconds, "o").
    """
    import numpy as np

    highlight = highlight or {}
    x = np.logspace(np.log10(intensity[0]), np.log10(intensity[1]), 200)
    rest = [hw for hw in devices if hw.name not in highlight]
    for i, hw in enumerate(rest):  # one grey family, one legend entry: the appendix's table names them all
        ax.plot(x, np.minimum(hw.flops, x * hw.bandwidth), color=FIT, lw=0.7, alpha=0.5,
                label=f"{len(rest)} more accelerators of the appendix's table" if i == 0 else None)
    for hw in devices:
        if hw.name in highlight:
            ax.plot(x, np.minimum(hw.flops, x * hw.bandwidth), color=highlight[hw.name], lw=1.8,
                    label=f"{hw.name} (ridge {hw.ridge:.0f})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable performance (FLOP/s)")
    return ax


REFERENCE_COLORS = ("#4f9a5a", "#e39b2b", "#7b5ea7", "#8c564b", "#17becf")  # one per reference run
REFERENCE_MARKERS = ("s", "D", "^", "v", "P")


def reference_series(ax, others, figure_name: str, *, scale_y: float = 1.0, relative: bool = False,
                     suffix: str = "", marker: str | None = None, linestyle: str = "-") -> int:
    """Draw every committed reference's series for `figure_name` on `ax`, beside this machine's points.

    `others` is the chapter's `references.compare.Comparison` (None: draw nothing); each reference is a colour
    and a marker of its own (`marker` overrides the marker: two series of one reference), joined by a thin
    line, labelled with what the reference is. `scale_y` converts the reference's unit to the axis's;
    `relative` divides each series by its first value instead, and the label says by which x. If the measured
    points (every line with markers: this machine's and the references') then span more than a factor of 30
    on an axis, that axis turns logarithmic, so that a GPU's milliseconds and a CPU's seconds can both be
    read. Returns how many series it drew."""
    if others is None:
        return 0
    drawn = others.series(figure_name)
    for i, (label, xs, ys) in enumerate(drawn):
        color = REFERENCE_COLORS[i % len(REFERENCE_COLORS)]
        shape = marker or REFERENCE_MARKERS[i % len(REFERENCE_MARKERS)]
        if relative:
            ys, label = [y / ys[0] for y in ys], f"{label}, relative to its {xs[0]:,}"
        else:
            ys = [y * scale_y for y in ys]
        ax.plot(xs, ys, marker=shape, ls=linestyle, color=color, ms=5, lw=0.8, label=label + suffix, zorder=3)
    if drawn:
        points = [line for line in ax.get_lines() if line.get_marker() not in (None, "None", "", " ")
                  and line.get_transform() == ax.transData]
        for data, scale, set_scale in (([v for p in points for v in p.get_xdata()], ax.get_xscale(), ax.set_xscale),
                                       ([v for p in points for v in p.get_ydata()], ax.get_yscale(), ax.set_yscale)):
            data = [float(v) for v in data if float(v) > 0]
            if scale == "linear" and data and max(data) / min(data) > 30:
                set_scale("log")
                axis = ax.xaxis if set_scale == ax.set_xscale else ax.yaxis
                axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,g}"))
                axis.set_minor_formatter(ticker.NullFormatter())
        ax.legend(fontsize=8)
    return len(drawn)

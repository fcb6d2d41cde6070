"""Chapter 5's figures, drawn from its records (`llmperf.chapters.anatomy`); nothing here measures.

- `by_kind`: a step's time by kind of op against each kind's bytes ÷ bandwidth
  (the profiled step, or the fused NumPy step);
- `fixed_costs`: the plain and the fused step split into their bytes, their ops'
  fixed costs and the rest;
- `vocab`: the LM head's share of a step's bytes, by model;
- `graph_steps`: the step eager, replayed from a CUDA Graph and compiled, on this
  machine where it has CUDA and on each GPU reference.
"""

from __future__ import annotations

import numpy as np

from ..cost import KIND_LABELS, OP_KINDS
from ..references.compare import short_label
from . import FIT, MEASURED, PALETTE, PREDICTED, figure


def by_kind(split, title: str | None = None):
    """Bars per kind of op: bytes ÷ probed bandwidth (predicted) and measured time, plus the time outside every
    op. `split` is a `Profile` (measured by the profiler) or a `NumpyAccount` (by a stopwatch; None is
    returned, and nothing drawn, when it was skipped)."""
    if getattr(split, "skipped", None):
        return None
    profiled = hasattr(split, "outside_label")
    outside = split.outside_label if profiled else "Python"
    fig, ax = figure()
    labels = [KIND_LABELS[k] for k in OP_KINDS] + [outside]
    y = np.arange(len(labels))
    predicted = [split.kind_bytes[k] / split.bandwidth * 1e3 for k in OP_KINDS] + [0]
    measured = [split.kinds[k].seconds * 1e3 for k in OP_KINDS] + [split.outside * 1e3]
    ax.barh(y - 0.2, predicted, 0.4, color=PREDICTED, label="bytes ÷ probed bandwidth")
    ax.barh(y + 0.2, measured, 0.4, color=MEASURED, label=f"measured ({'profiler' if profiled else 'stopwatch'})")
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("time per decode step (ms)")
    ax.set_title(title or (f"SmolLM2 decode step on {split.device}, by kind of op" if profiled
                           else "The fused NumPy step, by kind of op"))
    ax.legend()
    return fig


def fixed_costs(fixed):
    """For the plain and the fused step (a `FixedCost`): its bytes ÷ bandwidth, its ops × one op's fixed cost
    (drawn within the measured time), the rest, and the measured time as a tick."""
    fig, ax = figure(height=3.0)
    steps = fixed.steps()
    bw = fixed.bandwidth_time
    for i, (t, n) in enumerate(steps.values()):
        ops = min(n * fixed.op, max(t - bw, 0))  # drawn within the measured bar
        parts = [(bw, "bytes ÷ probed bandwidth", PREDICTED), (ops, "ops × fixed cost", PALETTE[3]),
                 (max(t - bw - ops, 0), "the rest", FIT)]
        left = 0.0
        for width, label, color in parts:
            ax.barh(i, width * 1e3, left=left * 1e3, color=color, label=label if i == 0 else None)
            left += width
        ax.plot(t * 1e3, i, "|", color=MEASURED, markersize=22, mew=2, label="measured" if i == 0 else None)
    ax.set_yticks(range(len(steps)), list(steps))
    ax.invert_yaxis()
    ax.set_xlabel("time per decode step (ms)")
    ax.set_title("Where a step's time goes: its bytes, its ops' fixed costs, the rest")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=4)
    return fig


def vocab(costs):
    """The LM head's share of a decode step's bytes for each model of a `VocabCosts`."""
    fig, ax = figure(height=2.6)
    names = list(costs.heads)
    ax.barh(names, [100 * costs.heads[n].share for n in names], color=PREDICTED)
    ax.invert_yaxis()
    ax.set_xlabel("LM head's share of a decode step's bytes (%)")
    ax.set_title("The vocabulary's cost, by model (2-byte weights)")
    return fig


# How a decode step is launched: the result's key, and the bar's label
STEP_LAUNCHES = (("eager_ms", "eager"), ("graph_ms", "CUDA Graph"), ("compiled_ms", "torch.compile,\nreduce-overhead"))


def graph_steps(replay, others=None):
    """Bars: the decode step eager, replayed from a CUDA Graph and through torch.compile, for this machine (a
    `Replay`, where it ran on CUDA) and for each GPU reference of `others` (the chapter's Comparison). None, and
    nothing drawn, where neither has a graph."""
    machines = []
    if not replay.skipped:
        machines.append(("this machine", {"eager_ms": replay.eager * 1e3, "graph_ms": replay.graph * 1e3,
                                          "compiled_ms": None if replay.compiled is None else replay.compiled * 1e3}))
    machines += [(short_label(ref.label), ref.results)
                 for ref in (others.refs if others is not None else []) if ref.gpu and ref.results.get("graph_ms")]
    if not machines:
        return None
    fig, ax = figure(height=1.2 + 0.9 * len(machines))
    width = 0.8 / len(STEP_LAUNCHES)
    for j, (key, label) in enumerate(STEP_LAUNCHES):
        for i, (_, values) in enumerate(machines):
            value = values.get(key)
            if value:
                y = i + (j - 1) * width
                ax.barh(y, value, width, color=PALETTE[j], label=label.replace("\n", " ") if i == 0 else None)
                ax.annotate(f"{value:,.1f} ms", (value, y), xytext=(3, 0), textcoords="offset points",
                            va="center", fontsize=8)
    ax.set_yticks(range(len(machines)), [name for name, _ in machines])
    ax.invert_yaxis()
    ax.set_xlabel("time per decode step (ms)")
    ax.set_title("One decode step: eager, from a CUDA Graph, compiled")
    ax.legend(loc="lower right")
    return fig

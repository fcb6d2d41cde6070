"""Chapter 1's figures: end-to-end time against N, and a prefill against a decode of the same tokens."""

from __future__ import annotations

import numpy as np

from . import MEASURED, PREDICTED, figure, measured_vs_line, reference_series


def latency_line(line, others=None):
    """Measured end-to-end times, the fitted line and the prediction TTFT + (N − 1)·step (a LatencyLine), and
    each committed reference's measured times (`others`, a references.compare.Comparison). Measurements are
    markers in MEASURED, the fit a line in FIT, the prediction a dashed line in PREDICTED."""
    fig, ax = figure()
    xs = np.linspace(0, line.Ns[-1], 50)
    measured_vs_line(ax, line.Ns, line.e2e, xs, line.line(xs), measured_label="measured",
                     line_label="least-squares fit", xlabel="tokens generated, N", ylabel="end-to-end time (s)",
                     title="Latency grows by one step per token")
    ttft, step = line.ingredients.ttft, line.ingredients.t_step
    ax.plot(xs, ttft + (xs - 1) * step, "--", color=PREDICTED, label="TTFT + (N − 1)·step, predicted", zorder=1)
    ax.legend()
    reference_series(ax, others, "latency_line", scale_y=1e-3)
    return fig


def same_flops(result):
    """The two times of a SameFlops record as bars: one pass over N tokens, N passes over one. Both are
    measurements, so both are drawn in MEASURED."""
    fig, ax = figure()
    ax.bar(["prefill\n1 pass × N tokens", "decode\nN passes × 1 token"],
           [result.t_prefill * 1e3, result.t_decode * 1e3], color=MEASURED, width=0.5)
    ax.set_ylabel(f"time for N = {result.N} tokens (ms)")
    ax.set_title("Same matmul FLOPs, different number of passes")
    return fig

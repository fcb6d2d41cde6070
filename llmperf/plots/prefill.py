"""Chapter 2's figures, drawn from its records (`llmperf.chapters.prefill`): nothing here measures."""

from __future__ import annotations

from . import FIT, MEASURED, PREDICTED, figure, measured_vs_line, reference_series


def _ms(seconds) -> list[float]:
    return [float(t) * 1e3 for t in seconds]


def ttft_figure(sweep, others=None):
    """Above: measured TTFT against the compute-bound prediction (causal, and full attention dashed) and the
    fitted parabola. Below: the FLOP rate each prefill achieved, against the probe at the model's shape.
    `sweep` is a `TTFTSweep`; `others` (a references.compare.Comparison) adds each reference's measured TTFT
    above."""
    grid, causal, full = sweep.predicted_curve()
    fig, (ax, ax2) = figure(panels=2)
    measured_vs_line(ax, sweep.lengths, _ms(sweep.ttft), grid, _ms(causal),
                     measured_label="measured (fastest run)", line_label="predicted: causal FLOPs ÷ matmul rate",
                     xlabel="prompt length S (tokens)", ylabel="TTFT (ms)", line_color=PREDICTED,
                     title=f"{sweep.model} prefill, {sweep.device}, {sweep.dtype}")
    ax.plot(grid, _ms(full), "--", color=PREDICTED, label="predicted, full attention")
    ax.plot(grid, _ms(sweep.fit(grid)), "-", color=FIT, label="fit a + b·S + c·S²")
    ax.legend()
    reference_series(ax, others, "ttft")
    ax2.plot(sweep.lengths, [r / 1e9 for r in sweep.achieved], "o-", color=MEASURED, label="achieved by the prefill")
    ax2.axhline(sweep.matmul_rate / 1e9, color=PREDICTED, ls="--", label="probe at the model's shape")
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel("prompt length S (tokens)")
    ax2.set_ylabel("FLOP rate (GFLOP/s)")
    ax2.set_title("causal FLOPs ÷ measured TTFT")
    ax2.legend()
    return fig


def batch_figure(batched):
    """Prefill throughput at batch 1 and batch B (bars), against the compute-bound prediction (batch 1's) and free
    batching (B times batch 1's). `batched` is a `BatchedPrefill`."""
    B, (tps_1, tps_b) = batched.batch, batched.tokens_per_s
    fig, ax = figure(width=5.5)
    ax.bar(["batch 1", f"batch {B}"], [tps_1, tps_b], color=MEASURED, width=0.5, label="measured")
    ax.axhline(tps_1, color=PREDICTED, ls="--", label="compute-bound prediction (same as batch 1)")
    ax.axhline(B * tps_1, color=FIT, ls=":", label=f"if batching were free ({B}× batch 1)")
    ax.set_ylabel("prefill throughput (tokens/s)")
    ax.set_title(f"{batched.model}, {batched.prompt_len}-token prompts")
    ax.set_ylim(0, 1.4 * B * tps_1)
    ax.legend(loc="upper left")
    return fig

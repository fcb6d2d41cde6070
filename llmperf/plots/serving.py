"""Chapter 6's figures, drawn from its records (`llmperf.chapters.serving`); nothing here measures."""

from __future__ import annotations

from . import FIT, MEASURED, PALETTE, PREDICTED, figure, log2_axis, reference_series
from ..chapters.serving import MLPERF_LIMITS


def exchange_rate(sweep, others=None):
    """Left: the server's output tokens/s against each user's, one point per max batch size, with MLPerf's
    TPOT limits as floors on a user's rate. Right: median and p99 TTFT against the batch size, with MLPerf's
    TTFT limits. `others` (a reference.compare.Comparison) adds each reference's curve on the left."""
    fig, (ax, ax2) = figure(ncols=2, width=10)
    batches, per_user, agg = sweep.batches, sweep.per_user, sweep.tok_s
    ax.plot(per_user, agg, "o-", color=MEASURED)
    for b, x, y in zip(batches, per_user, agg):
        ax.annotate(f"batch {b}", (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    limits = list(zip(MLPERF_LIMITS.items(), PALETTE[1:]))
    for (name, (_, tpot)), color in limits:
        ax.axvline(1 / tpot, color=color, ls="--", lw=1, label=f"MLPerf {name}: TPOT ≤ {tpot * 1e3:.0f} ms")
    ax.set_xlabel("tokens/s per user (1 ÷ mean TPOT)")
    ax.set_ylabel("output tokens/s, whole server")
    ax.set_title("The exchange rate: server against user")
    ax.legend(loc="upper right")
    reference_series(ax, others, "exchange_rate")
    ax2.plot(batches, sweep.percentile("ttft", "median"), "o-", color=MEASURED, label="median")
    ax2.plot(batches, sweep.percentile("ttft", "p99"), "s--", color=MEASURED, alpha=0.6, label="p99")
    for (name, (ttft, _)), color in limits:
        ax2.axhline(ttft, color=color, ls="--", lw=1, label=f"MLPerf {name}: TTFT ≤ {ttft:g} s")
    _batch_axis(ax2, batches)
    ax2.set_yscale("log")
    ax2.set_ylabel("TTFT (s)")
    ax2.set_title(f"Time to first token, SmolLM2 on {sweep.device}")
    ax2.legend(fontsize=8)
    return fig


def loops_over_time(loops):
    """Each loop of the stall workload over time: the server's polled count of requests in flight, each
    request's TTFT at the moment it was sent, and the long prompt's wait and prefill shaded."""
    fig, axes = figure(ncols=2, width=10)
    for ax, x in zip(axes, loops.loops):
        t0 = min(r.sent for r in x.requests)
        ts, counts = zip(*x.polled)
        ax.step([t - t0 for t in ts], counts, where="post", color=FIT, label="in flight (server's count)")
        start, end = x.stall
        ax.axvspan(start - t0, end - t0, color=PREDICTED, alpha=0.15, label="long prompt waiting and prefilled")
        ok = [r for r in x.requests if r.ok]
        ax.plot([r.sent - t0 for r in ok], [r.times.ttft for r in ok], "o", color=MEASURED, ms=4,
                label="TTFT of a request sent then (s)")
        ax.axhline(loops.concurrency, color=FIT, ls=":", lw=1)
        ax.set_xlabel("time since the first request (s)")
        ax.set_ylabel("requests / seconds")
        ax.set_title(f"{x.name} loop, {x.summary.request_throughput:.2f} requests/s")
    axes[0].legend(fontsize=8, loc="upper left")
    return fig


def goodput(sweep):
    """Request throughput and goodput (requests/s meeting both objectives) against the max batch size."""
    fig, ax = figure()
    ax.plot(sweep.batches, sweep.req_s, "o-", color=MEASURED, label="throughput: every request")
    ax.plot(sweep.batches, sweep.goodput, "s-", color=PREDICTED, label="goodput: requests meeting both objectives")
    _batch_axis(ax, sweep.batches)
    ax.set_ylabel("requests/s")
    ax.set_title("Throughput against goodput")
    ax.legend()
    return fig


def _batch_axis(ax, batches) -> None:
    log2_axis(ax, batches, "max batch size (= clients)")

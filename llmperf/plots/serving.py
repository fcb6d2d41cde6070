"""Chapter 6's figures, drawn from its records (`llmperf.chapters.serving`'s, `llmperf.metrics.RequestRecord`)
taken as arguments; nothing here measures, and nothing here imports the chapter or the server."""

from __future__ import annotations

from . import FIT, MEASURED, PALETTE, cdf, figure, log2_axis, reference_series
from .. import metrics

MS = 1e3  # seconds to milliseconds
LABELLED_GAPS = 8  # a timeline labels each gap when it has at most this many


def _axes(ax):
    """(fig, ax): a new figure in the book's style, or the figure `ax` is on."""
    if ax is None:
        return figure()
    return ax.figure, ax


def request_timeline(record, ax=None):
    """One streamed request on a time axis, in ms from its send: the send, the first token, each later token
    and the last one; TTFT, every gap between successive tokens, and E2E marked and labelled; TPOT, the mean
    gap after the first token ((E2E − TTFT) ÷ (n − 1)), drawn as one more bar of that length. `record` is a
    `metrics.RequestRecord` (or anything with `sent` and `token_times`, and optionally `output_tokens`) with
    at least two tokens. Draws on `ax` when given; returns the figure."""
    arrivals = list(getattr(record, "token_times", ()))
    if len(arrivals) < 2:
        raise ValueError(f"A timeline needs a request with at least 2 streamed tokens; this one has "
                         f"{len(arrivals)}, so it has no gap between tokens and no TPOT.")
    times = metrics.RequestTimes(record.sent, arrivals, getattr(record, "output_tokens", None))
    t = [(a - times.sent) * MS for a in times.token_times]  # ms from the send
    ttft, e2e, tpot, gaps = times.ttft * MS, times.e2e * MS, times.tpot * MS, [g * MS for g in times.itl]
    fig, ax = _axes(ax)
    ax.plot([0], [0], "s", color=FIT, ms=8, label="request sent", zorder=3)
    ax.plot([t[0]], [0], "o", color=MEASURED, ms=8, label="first token", zorder=3)
    ax.plot(t[1:-1], [0] * (len(t) - 2), "|", color=MEASURED, ms=14, mew=1.5, label="later tokens", zorder=3)
    ax.plot([t[-1]], [0], "D", color=MEASURED, ms=8, label="last token", zorder=3)
    ax.axhline(0, color=FIT, lw=0.8, zorder=1)

    def span(x0, x1, y, text, color=MEASURED, size=9):
        ax.annotate("", (x1, y), (x0, y), arrowprops={"arrowstyle": "<->", "color": color, "lw": 1.2,
                                                       "shrinkA": 0, "shrinkB": 0})
        ax.text((x0 + x1) / 2, y + 0.08, text, ha="center", va="bottom", fontsize=size, color=color)

    for (a, b), g in zip(zip(t, t[1:]), gaps):
        span(a, b, 0.45, f"{g:.0f}" if len(gaps) <= LABELLED_GAPS else "", color=PALETTE[2], size=8)
    ax.text(t[-1], 0.45, "  gaps between tokens (ITL), ms", ha="left", va="center", fontsize=8, color=PALETTE[2])
    span(t[0], t[0] + tpot, 1.0, f"TPOT = mean gap = {tpot:.1f} ms", color=PALETTE[3])
    span(0, ttft, 1.55, f"TTFT = {ttft:.0f} ms")
    span(0, e2e, 2.1, f"E2E = {e2e:.0f} ms = TTFT + TPOT × (n − 1), n = {times.n_tokens}")
    ax.set_ylim(-0.5, 2.7)
    ax.set_yticks([])
    ax.spines["left"].set_visible(False)
    ax.set_xlim(-0.03 * e2e, 1.25 * e2e)
    ax.set_xlabel("time since the request was sent (ms)")
    ax.set_title("One streamed request")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8, ncols=4)
    return fig


def ttft_cdf(records, percentiles=(50, 90, 99), ax=None, method: str = "linear"):
    """The empirical CDF (a step) of the successful records' TTFT in ms, and a dashed vertical at each of
    `percentiles`, labelled with its value and its method, computed by `metrics.percentile` with `method`
    (the chapter's: "linear" unless it says otherwise). Draws on `ax` when given; returns the figure."""
    ttfts = sorted(r.times.ttft * MS for r in records if r.ok)
    if not ttfts:
        raise ValueError("No successful request to draw a TTFT distribution of: every record failed or was "
                         "empty (RequestRecord.ok is False for all of them).")
    fig, ax = _axes(ax)
    cdf(ax, ttfts, f"TTFT of {len(ttfts)} requests", "TTFT", "ms", percentiles, method)
    ax.set_title("Distribution of time to first token")
    ax.legend(loc="lower right", fontsize=8)
    return fig


def exchange_rate(sweep, others=None):
    """Above: the server's output tokens/s against each user's, one point per max batch size at 1 ÷ mean TPOT,
    with a bar from 1 ÷ p99 TPOT (the sweep's percentile method) to it: MLPerf limits the p99 TPOT, so a batch
    meets a scenario's TPOT limit when its bar's left end lies right of that scenario's vertical line. Below:
    median and p99 TTFT against the batch size, with MLPerf's TTFT limits (`sweep.limits`). `sweep` is chapter
    6's BatchSweep; `others` (a references.compare.Comparison) adds each reference's curve above."""
    fig, (ax, ax2) = figure(panels=2)
    batches, per_user, agg = sweep.batches, sweep.per_user, sweep.tok_s
    slowest = [1 / t for t in sweep.percentile("tpot", "p99")]  # tokens/s at the p99 TPOT
    ax.plot(per_user, agg, "o-", color=MEASURED, label="1 ÷ mean TPOT")
    ax.hlines(agg, slowest, per_user, color=MEASURED, lw=2.5, alpha=0.45, label="bar from 1 ÷ p99 TPOT")
    ax.plot(slowest, agg, "|", color=MEASURED, ms=9, mew=2, alpha=0.7)
    for b, x, y in zip(batches, per_user, agg):
        ax.annotate(f"batch {b}", (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    limits = list(zip(sweep.limits.items(), PALETTE[2:]))  # limits, not predictions: not PREDICTED
    for (name, (_, tpot)), color in limits:
        ax.axvline(1 / tpot, color=color, ls="--", lw=1, label=f"MLPerf {name}: p99 TPOT ≤ {tpot * 1e3:.0f} ms")
    ax.set_xlabel("tokens/s per user: point 1 ÷ mean TPOT, bar's left end 1 ÷ p99 TPOT")
    ax.set_ylabel("output tokens/s, whole server")
    ax.set_title("The exchange rate: server against user")
    ax.legend(loc="upper right")
    reference_series(ax, others, "exchange_rate")
    ax2.plot(batches, sweep.percentile("ttft", "median"), "o-", color=MEASURED, label="median")
    ax2.plot(batches, sweep.percentile("ttft", "p99"), "s--", color=MEASURED, alpha=0.6, label="p99")
    for (name, (ttft, _)), color in limits:
        ax2.axhline(ttft, color=color, ls="--", lw=1, label=f"MLPerf {name}: p99 TTFT ≤ {ttft:g} s")
    _batch_axis(ax2, batches)
    ax2.set_yscale("log")
    ax2.set_ylabel("TTFT (s)")
    ax2.set_title(f"Time to first token, SmolLM2 on {sweep.device}")
    ax2.legend(fontsize=8)
    return fig


def loops_over_time(loops):
    """Each loop of the stall workload over time, one panel each: the server's polled count of requests in flight
    (left axis), each request's TTFT at the moment it was sent (right axis), and the long prompt's wait and
    prefill shaded."""
    fig, axes = figure(panels=2, height=3.0)
    twins = []
    for ax, x in zip(axes, loops.loops):
        t0 = min(r.sent for r in x.requests)
        ts, counts = zip(*x.polled)
        ax.step([t - t0 for t in ts], counts, where="post", color=FIT, label="in flight (server's count)")
        start, end = x.stall
        ax.axvspan(start - t0, end - t0, color=PALETTE[3], alpha=0.15, label="long prompt waiting and prefilled")
        ax.axhline(loops.concurrency, color=FIT, ls=":", lw=1, label="the closed loop's clients")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("time since the first request (s)")
        ax.set_ylabel("requests in flight")
        ax.set_title(f"{x.name} loop, {x.summary.request_throughput:.2f} requests/s")
        ttft = ax.twinx()
        twins.append(ttft)
        ttft.spines["right"].set_visible(True)
        ttft.grid(False)
        ok = [r for r in x.requests if r.ok]
        ttft.plot([r.sent - t0 for r in ok], [r.times.ttft for r in ok], "o", color=MEASURED, ms=4,
                  label="TTFT of a request sent then")
        ttft.set_ylim(bottom=0)
        ttft.set_ylabel("TTFT (s)", color=MEASURED)
    handles = [h for a in (axes[0], twins[0]) for h in a.get_legend_handles_labels()[0]]
    axes[0].legend(handles=handles, fontsize=8, loc="upper left")
    return fig


def goodput(sweep):
    """Request throughput and goodput (requests/s meeting both objectives) against the max batch size: both are
    measured, so both are drawn in the measured colour, goodput with open squares on a dashed line."""
    fig, ax = figure()
    ax.plot(sweep.batches, sweep.req_s, "o-", color=MEASURED, label="throughput: every request")
    ax.plot(sweep.batches, sweep.goodput, "s--", color=MEASURED, mfc="white", mew=1.5,
            label="goodput: requests meeting both objectives")
    _batch_axis(ax, sweep.batches)
    ax.set_ylabel("requests/s")
    ax.set_title("Throughput against goodput")
    ax.legend()
    return fig


def _batch_axis(ax, batches) -> None:
    log2_axis(ax, batches, "max batch size (= clients)")

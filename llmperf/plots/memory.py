"""Chapter 6's figures of the KV cache's memory, drawn from its records taken as arguments (nothing here
measures, and nothing here imports the chapter or the server): the same burst served reserved, paged and
overcommitted, step by step; and the time to the first token by turn of a conversation, prefix caching on and off.
"""

from __future__ import annotations

from . import PALETTE, figure

MS = 1e3


def memory_over_time(runs):
    """Two panels over the seconds since the burst was sent, one colour per run (`runs`: name -> a record with
    `samples` of (time, in flight, blocks held, positions written), `start`, `block_size` and `budget`): the
    requests in flight; and the KV blocks held (solid) against the blocks' worth of positions holding keys and
    values (dashed), with each budget dotted."""
    fig, (top, bottom) = figure(panels=2, height=3.0)
    budgets: dict[int, list[str]] = {}
    for (name, run), color in zip(runs.items(), PALETTE):
        t = [s[0] - run.start for s in run.samples]
        top.step(t, [s[1] for s in run.samples], where="post", color=color, label=name)
        bottom.step(t, [s[2] for s in run.samples], where="post", color=color)
        bottom.step(t, [s[3] / run.block_size for s in run.samples], where="post", color=color, ls="--")
        budgets.setdefault(run.budget, []).append(name)
    for budget, names in budgets.items():
        bottom.axhline(budget, color="black", ls=":", lw=1)
        bottom.annotate(f"budget: {' and '.join(names)}", (1, budget), xycoords=("axes fraction", "data"),
                        xytext=(0, 3), textcoords="offset points", ha="right", fontsize=8)
    top.set(xlabel="seconds since the burst was sent", ylabel="requests in flight",
            title="How many requests the same budget let run at once")
    bottom.set(xlabel="seconds since the burst was sent", ylabel="KV blocks",
               title="Blocks held (solid), and their positions holding keys and values (dashed)")
    bottom.set_ylim(top=max(budgets) * 1.15)
    top.legend(loc="upper right")
    return fig


def ttft_by_turn(turns):
    """The time to the first token of each turn of the conversations, prefix caching off and on (`turns`: a record
    with `off` and `on`, each with `records` having `turn` and `times.ttft`, and `ttft(turn)` their median; and
    `shape.prefilled(caching)`, the positions each turn prefills), each turn's requests as points and their median
    as a line, labelled with the positions prefilled."""
    fig, ax = figure()
    for run, name, color, dy in ((turns.off, "prefix caching off", PALETTE[1], 6),
                                 (turns.on, "prefix caching on", PALETTE[0], -12)):
        records, prefilled = run.records, turns.shape.prefilled(run.caching)
        ks = sorted({r.turn for r in records if r.ok})
        for k in ks:
            ttfts = [r.times.ttft * MS for r in records if r.turn == k and r.ok]
            ax.plot([k] * len(ttfts), ttfts, "o", color=color, alpha=0.4, ms=5)
        medians = [run.ttft(k) * MS for k in ks]
        ax.plot(ks, medians, "-", color=color, label=f"{name} (median)")
        for k, m, n in zip(ks, medians, prefilled):
            ax.annotate(f"{n} prefilled", (k, m), textcoords="offset points", xytext=(6, dy), fontsize=8, color=color)
    ax.set(xlabel="turn of the conversation", ylabel="TTFT (ms)", xticks=ks,
           title="Each turn carries the whole conversation: TTFT by turn")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left")
    return fig

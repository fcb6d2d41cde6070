"""Chapter 6, serving metrics on a real server: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or predicted) and returns the
clause they support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations

from ...prefills import PREFILL_CHUNK, prefill_groups, prefill_steps
from ...wording import times, duration


def itl_against_tpot(tpot_mean: float, itl_mean: float) -> str:
    """Mean ITL (every gap counts once) against mean TPOT (every request counts once)."""
    ratio = itl_mean / tpot_mean
    said = f"mean ITL is {duration(itl_mean)} against a mean TPOT of {duration(tpot_mean)}"
    if abs(ratio - 1) <= 0.02:
        return (f"{said}, within 2 %: in this run the long answers' gaps were about as long as the short "
                "answers', so weighing them by their length changed little")
    side, which = ("above", "longer") if ratio > 1 else ("below", "shorter")
    return (f"{said}, {100 * abs(ratio - 1):.0f} % {side} it: the long answers, which weigh more in ITL, had "
            f"{which} gaps than the short ones")


def _batches(bs) -> str:
    """Batch sizes as a list in words: "1", "1 and 4", "1, 4 and 16"."""
    bs = [str(b) for b in bs]
    return bs[0] if len(bs) == 1 else f"{', '.join(bs[:-1])} and {bs[-1]}"


def limits_met(batches, ttft_p99, tpot_p99, ttft_limit: float, tpot_limit: float, scenario: str) -> str:
    """Which batch sizes of a sweep meet both of a pair of p99 latency limits (seconds), e.g. MLPerf's, and
    which limit each of the others misses."""
    limits = f"MLPerf's {scenario} limits (p99 TTFT ≤ {duration(ttft_limit)}, p99 TPOT ≤ {duration(tpot_limit)})"
    over_ttft = [b for b, t in zip(batches, ttft_p99) if t > ttft_limit]
    over_tpot = [b for b, p in zip(batches, tpot_p99) if p > tpot_limit]
    if not over_ttft and not over_tpot:
        return f"every batch size in this sweep, up to {batches[-1]}, meets both of {limits}"
    missed = [f"p99 {name} is over its limit at batch {_batches(over)}"
              for name, over in (("TTFT", over_ttft), ("TPOT", over_tpot)) if over]
    why = " and ".join(missed)
    ok = [b for b in batches if b not in over_ttft and b not in over_tpot]
    if ok:
        return f"both of {limits} hold at batch {_batches(ok)} only: {why}"
    every_ttft, every_tpot = len(over_ttft) == len(batches), len(over_tpot) == len(batches)
    if every_ttft and every_tpot:
        alone = "either limit alone rules every one out"
    elif every_tpot or every_ttft:
        alone = f"{'TPOT' if every_tpot else 'TTFT'} alone rules every one out"
    else:
        alone = "neither limit alone rules them all out, but every batch size misses one of the two"
    return f"no batch size in this sweep meets both of {limits}: {why}; {alone}"


def prefill_bursts(batch: int, steps: int, prefills: dict[int, int], answer: int, prompt: int,
                   chunk: int = PREFILL_CHUNK) -> str:
    """How the prefills of a closed-loop run at max batch `batch` fell on the engine's `steps` steps:
    `prefills` maps k to the number of steps that admitted k newcomers; every request asked `answer` tokens
    after a `prompt`-token prompt (so an engine prefilling at most `chunk` positions a step prefills a burst in
    `prefills.prefill_groups`' passes, over `prefills.prefill_steps` steps)."""
    bursts = sum(n for k, n in prefills.items() if k > 0)
    total = sum(k * n for k, n in prefills.items())
    largest = max((k for k, n in prefills.items() if n > 0), default=0)
    said = (f"at batch {batch} the engine ran {steps} steps, and {bursts} of them admitted newcomers, "
            f"{total} in all")
    if bursts == 0:
        return f"at batch {batch} the engine ran {steps} steps and none admitted a newcomer"
    if bursts > steps / 2:
        return (f"{said}: most steps carried a newcomer's prefill, which held up every sequence already in the "
                "batch")
    if largest == 1:
        return (f"{said}, one at a time, about one step in {steps / bursts:.0f}: newcomers arrived spread out, "
                "and each held up the batch for one prefill")
    passes, over = len(prefill_groups([prompt] * largest, chunk)), prefill_steps([prompt] * largest, chunk)
    how = ("in the same step, together, in one pass over all their prompts that reads the weights once for all of "
           "them, then decode together and finish together, and their replacements arrive as the next burst; every "
           "newcomer of a burst waits for the whole pass" if passes == 1 else
           f"in {passes} passes over {over} steps (a step prefills at most {chunk:,} positions before the "
           "batch decodes), then decode together and finish together, and their replacements arrive as the next "
           "burst; a burst's last newcomers wait for the passes before theirs")
    return (f"{said}, {total / bursts:.1f} at a time on average and up to {largest}, about one step in "
            f"{steps / bursts:.0f}. Every request asks {answer} tokens and the engine admits every waiting request "
            f"at once, so the newcomers of a burst are prefilled {how}")


def long_prefill(long: int, chunk: int = PREFILL_CHUNK) -> str:
    """How an engine prefilling at most `chunk` positions a step treats one `long`-token prompt."""
    pieces = prefill_steps([long], chunk)
    if pieces == 1:
        return (f"it fits one step's prefill (at most {chunk:,} positions), so the engine prefills it in one pass "
                "and every sequence decoding waits for all of it")
    return (f"the engine prefills it in {pieces} pieces of at most {chunk:,} positions, one a step (chunked "
            "prefill, as vLLM and llama.cpp do), so the sequences already decoding get a token between the pieces, "
            "while requests that arrive meanwhile wait behind it")


def percentiles_add(q: int, e2e: float, rebuilt: float) -> str:
    """A run's q-th percentile of E2E against the same percentile of TTFT + that of TPOT × (that of n − 1)."""
    said = (f"the p{q} E2E is {duration(e2e)}, while p{q} TTFT + p{q} TPOT × (p{q} n − 1) gives "
            f"{duration(rebuilt)}")
    ratio = rebuilt / e2e
    if abs(ratio - 1) <= 0.05:
        return (f"{said}, within 5 %: close in this run, but only by luck, since the request at the p{q} of one "
                f"metric is seldom the one at the p{q} of another")
    side = "over" if ratio > 1 else "under"
    return (f"{said}, {100 * abs(ratio - 1):.0f} % {side}: the request at the p{q} of one metric is not the one at "
            f"the p{q} of another, so percentiles do not add")


def goodput_peak(batches, throughput, goodput) -> str:
    """Where request throughput and goodput (requests/s meeting the objectives) peak over a batch sweep."""
    if max(goodput) == 0:
        return "no request met the objectives at any batch size, so goodput is zero throughout"
    best_t = batches[max(range(len(batches)), key=lambda i: throughput[i])]
    best_g = batches[max(range(len(batches)), key=lambda i: goodput[i])]
    if best_t == best_g:
        return f"throughput and goodput both peak at batch {best_t}"
    if best_g < best_t:
        return (f"throughput peaks at batch {best_t} but goodput at batch {best_g}: past that, batching adds "
                "requests per second that miss the objectives")
    return (f"throughput peaks at batch {best_t} but goodput at the larger batch {best_g}: so many of batch "
            f"{best_t}'s requests missed the objectives that batch {best_g}, finishing fewer requests per second, "
            "had more of them within the objectives")


def warm_up(first: float, rest_median: float) -> str:
    """A fresh server's first TTFT against the median of the requests after it."""
    ratio = first / rest_median
    said = f"{duration(first)} against a median of {duration(rest_median)} for the rest"
    if ratio > 1.5:
        return (f"took {times(ratio)} as long: {said}. Left in, it would pull the mean up; benchmarks "
                "send a few warm-up requests first and discard them")
    return (f"was not much slower: {said}, so whatever one-time costs this server paid were small beside one "
            "request. A server in a freshly started process (on a GPU, one that has not yet loaded its kernels) "
            "can pay more, and benchmarks send a few warm-up requests first and discard them")


OMISSION_QS = (50, 90, 99)  # the TTFT percentiles `omission` compares
OMISSION_MARGIN = 1.1  # one loop's percentile "longer" than the other's: more than 10 % above it


def omission(closed_sent: int, open_sent: int, expected: float, closed_ttft: dict[int, float],
             open_ttft: dict[int, float], stall: float) -> str:
    """What a closed loop hid during a stall of `stall` seconds: the requests each loop sent while it lasted
    (`expected` at the open loop's rate), and the p50, p90 and p99 TTFT of the other requests in each loop
    ({q: s}); a percentile counts as longer in one loop when it is more than 10 % above the other's."""
    sent = (f"While the long prompt waited and was prefilled ({duration(stall)}), the closed-loop clients "
            f"sent {closed_sent} request{'s' if closed_sent != 1 else ''} and the open loop {open_sent}, where "
            f"users arriving at the open loop's rate would have sent {expected:.1f}")
    pairs = ", ".join(f"p{q} {duration(open_ttft[q])} against {duration(closed_ttft[q])}" for q in OMISSION_QS)
    said = f"{sent}. Leaving the long request itself out, the open loop's TTFTs against the closed loop's were {pairs}"
    longer = [q for q in OMISSION_QS if open_ttft[q] > OMISSION_MARGIN * closed_ttft[q]]
    shorter = [q for q in OMISSION_QS if closed_ttft[q] > OMISSION_MARGIN * open_ttft[q]]
    qs = " and ".join(f"p{q}" for q in longer)
    if len(longer) == len(OMISSION_QS):
        return (f"{said}: longer at every percentile. Requests that arrive while the server is busy wait it out, "
                "and the requests after them wait behind them; a closed loop never sends them")
    if longer and longer[-1] == OMISSION_QS[-1]:
        return (f"{said}: the median no longer, the tail longer ({qs}). The requests that arrived during the stall "
                "waited it out, while the rest met a server with room to spare; a closed loop never sends the "
                "requests that wait")
    if longer:
        return (f"{said}: longer at {qs} but not at p99, where each loop's value rests on its one or two slowest "
                "requests. The requests that arrived during the stall waited it out; a closed loop never sends "
                "them")
    if shorter:
        return (f"{said}: no longer at any percentile, and shorter at {' and '.join(f'p{q}' for q in shorter)}. "
                "What the closed loop hid shows in the counts alone this time: the requests that would have "
                "arrived during the stall were never sent")
    return (f"{said}: within 10 % at every percentile, too few arrivals fell in the stall to show this time. "
            "The gap grows with the stall and with the rate")


def _ms(seconds: float) -> str:
    """A time in milliseconds, as the chapter's tables print them."""
    return f"{seconds * 1e3:,.1f} ms"


def percentile_spread(p50: tuple[float, float], p99: tuple[float, float], n: int, largest: float) -> str:
    """How far the median and the p99 moved across resampled reruns of one run of `n` values whose largest is
    `largest`: (low, high) of each, s. A resampled rerun holds only the run's own values, so its p99 can never
    exceed `largest`: a narrow p99 range is no sign of a steady tail."""
    w50, w99 = p50[1] - p50[0], p99[1] - p99[0]
    said = (f"the median stayed between {_ms(p50[0])} and {_ms(p50[1])}, the p99 between {_ms(p99[0])} and "
            f"{_ms(p99[1])}")
    tail = "The tail of a few dozen requests rests on the one or two slowest, and moves with them"
    capped = (f"a resampled rerun holds only the run's own {n} values, so its p99 can never exceed their largest, "
              f"{_ms(largest)}, and the p99's range is narrow by construction, showing how far the tail could fall but "
              "not how far a real rerun's could rise")
    if w50 == 0:
        if w99 == 0:
            return (f"{said}: neither moved at all, since the run's values repeat and every rerun landed on the "
                    "same ones. A tail of a few dozen requests usually rests on the one or two slowest")
        return f"{said}: the median did not move at all while the p99 did. {tail}"
    if w99 > 1.5 * w50:
        return f"{said}, a range {w99 / w50:.1f} times as wide. {tail}"
    if w99 == 0:
        return (f"{said}: the p99 did not move at all while the median did, since the run's slowest values "
                f"repeat and every rerun's p99 landed on them. That is no steadier tail: {capped}")
    if w50 > 1.5 * w99:
        return (f"{said}: the median's range was {w50 / w99:.1f} times as wide as the p99's. That is no steadier "
                f"tail: {capped}")
    return f"{said}: the p99's range was about as narrow as the median's, and that is no steadier tail: {capped}"


def residual_text(residual: float, rounding: float) -> str:
    """The largest |E2E − (TTFT + TPOT·(n − 1))| of a run (s), in words, against `rounding`, the most that
    floating-point rounding explains."""
    if residual == 0:
        return "exactly 0 s"
    units = (("seconds", 1.0), ("milliseconds", 1e-3), ("microseconds", 1e-6), ("nanoseconds", 1e-9),
             ("picoseconds", 1e-12), ("femtoseconds", 1e-15))
    name, scale = next(((u, k) for u, k in units if residual >= k), units[-1])
    v = residual / scale
    said = f"{v:,.0f} {name}" if v >= 100 else f"{v:.1f} {name}" if v >= 10 else f"{v:.2g} {name}"
    if residual < rounding:
        return f"{said}, floating-point rounding"
    return f"{said}, more than floating-point rounding explains"


def throughput_path(batches, tok_s) -> str:
    """Whether the server's tokens/s rose at every step of a batch sweep, or at which batch sizes it fell
    below the smaller batch's just before."""
    fell = [(b, t, a, prev) for a, b, prev, t in zip(batches, batches[1:], tok_s, tok_s[1:]) if t < prev]
    if not fell:
        return ("The server's output never fell along the way: each larger batch made at least the tokens/s of the "
                "one before")
    where = " and ".join(f"at batch {b} ({t:,.1f} tokens/s against {prev:,.1f} at batch {a})"
                         for b, t, a, prev in fell)
    return (f"The server's output did not rise at every step, though: it fell {where}, so the trade is read from "
            "the ends of the sweep, not from each step")


def knee_text(load: str | None, tok_s: float, e2e: float) -> str:
    """Where a sweep's knee is (`load` None: the curve had none to find), with its throughput and median E2E."""
    if load is None:
        return ("the curve has no knee to find: its latency did not rise as its throughput did, or it has too "
                "few points")
    return (f"the knee, where more load stops buying throughput and starts buying latency, is at {load}: "
            f"{tok_s:,.0f} tokens/s at a median E2E of {duration(e2e)}")


def distserve_goodput(loads, served, attained, target: float, best: int | None, n: int) -> str:
    """DistServe's goodput read off a rate sweep of `n` requests per load: `loads` (names, lightest first),
    `served` (requests/s), `attained` (the share of each point's requests meeting every objective), `best` the
    index of the heaviest load at which at least `target` did (None if none did)."""
    def pct(x: float) -> str:
        return f"{round(x * n)} of {n} ({100 * x:.0f} %)"

    if best is None:
        return (f"not even one request at a time met the objectives for {100 * target:.0f} % of its requests: "
                f"{pct(attained[0])} did, so under them this server's goodput is zero")
    if best == len(loads) - 1:
        return (f"even with every request sent at once, {pct(attained[best])} met the objectives, so they do not "
                f"limit this server: its goodput is its capacity, {served[best]:.2f} requests/s")
    return (f"the heaviest load at which {100 * target:.0f} % of requests met the objectives was {loads[best]}, "
            f"serving {served[best]:.2f} requests/s with {pct(attained[best])} within them; at the next, "
            f"{loads[best + 1]}, only {pct(attained[best + 1])} were. DistServe's goodput lies between the two")


def step_time_path(batches, tpot_mean) -> str:
    """How the mean TPOT (s), about one engine step as each user sees it, moved over a batch sweep: up at every
    step, up from end to end but not at every step, or not up from end to end."""
    ends = (f"mean TPOT went from {duration(tpot_mean[0])} at batch {batches[0]} to {duration(tpot_mean[-1])} at "
            f"batch {batches[-1]}")
    fell = [(b, t, a, prev) for a, b, prev, t in zip(batches, batches[1:], tpot_mean, tpot_mean[1:]) if t <= prev]
    if tpot_mean[-1] <= tpot_mean[0]:
        return (f"Each step decodes more sequences, yet the steps took no longer from end to end: {ends}; in this "
                "sweep the extra sequences cost no step time that the run could measure")
    if not fell:
        return f"Each step decodes more sequences, and took longer at every batch size here: {ends}"
    where = " and ".join(f"at batch {b} ({duration(t)} against {duration(prev)} at batch {a})"
                         for b, t, a, prev in fell)
    return (f"Each step decodes more sequences, and from end to end the steps took longer ({ends}), but not at "
            f"every step: it did not rise {where}")


def user_against_server(user_1: float, server_1: float) -> str:
    """The sweep table's caption: what each tokens/s counts, and, if batch 1's user outran its server
    (`user_1` against `server_1`, tokens/s), why."""
    what = ("tokens/s per user is 1 ÷ mean TPOT, which counts only the time from a request's first token to its "
            "last; the server's output tokens/s divides every token by the run's wall time, which also holds "
            "each request's TTFT and the moments between one request's end and the next one's start")
    if user_1 > server_1:
        return (f"{what}: so at batch 1, one request at a time, a user's {user_1:.1f} tokens/s exceed the "
                f"server's {server_1:.1f}")
    return what

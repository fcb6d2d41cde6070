"""Chapter 6, serving metrics on a real server: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or predicted) and returns the
clause they support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations

from ..wording import times, duration


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


def limits_met(batches, ttft_p99, tpot_p99, ttft_limit: float, tpot_limit: float, scenario: str) -> str:
    """Which batch sizes of a sweep meet a pair of p99 latency limits (seconds), e.g. MLPerf's."""
    limits = f"MLPerf's {scenario} limits (p99 TTFT ≤ {duration(ttft_limit)}, p99 TPOT ≤ {duration(tpot_limit)})"
    ok = [b for b, t, p in zip(batches, ttft_p99, tpot_p99) if t <= ttft_limit and p <= tpot_limit]
    if not ok:
        worst = "TPOT" if min(tpot_p99) > tpot_limit else "TTFT"
        return f"no batch size in this sweep meets {limits} on this machine; {worst} alone rules every one out"
    if len(ok) == len(batches):
        return f"every batch size in this sweep, up to {batches[-1]}, meets {limits}"
    failed = [b for b in batches if b not in ok]
    return (f"{limits} hold at batch {', '.join(map(str, ok))} and fail at batch "
            f"{', '.join(map(str, failed))}")


def goodput_peak(batches, throughput, goodput) -> str:
    """Where request throughput and goodput (requests/s meeting the objectives) peak over a batch sweep."""
    if max(goodput) == 0:
        return "no request met the objectives at any batch size, so goodput is zero throughout"
    best_t = batches[max(range(len(batches)), key=lambda i: throughput[i])]
    best_g = batches[max(range(len(batches)), key=lambda i: goodput[i])]
    if best_t == best_g:
        return f"throughput and goodput both peak at batch {best_t}"
    return (f"throughput peaks at batch {best_t} but goodput at batch {best_g}: past that, batching adds "
            "requests per second that miss the objectives")


def warm_up(first: float, rest_median: float) -> str:
    """A fresh server's first TTFT against the median of the requests after it."""
    ratio = first / rest_median
    said = f"{duration(first)} against a median of {duration(rest_median)} for the rest"
    if ratio > 1.5:
        return (f"took {times(ratio)} as long: {said}. Left in, it would pull the mean up; benchmarks "
                "send a few warm-up requests first and discard them")
    return (f"was not much slower: {said}. This process had already run the model, so little was left to "
            "warm up; a freshly started server (on a GPU, one that has not yet loaded its kernels) is "
            "another matter, and benchmarks send a few warm-up requests first and discard them")


def omission(closed_sent: int, open_sent: int, expected: float, closed_worst: float, open_worst: float,
             stall: float) -> str:
    """What a closed loop hid during a stall of `stall` seconds: the requests sent while it lasted (`expected`
    at the run's rate), and the worst TTFT of the other requests in each loop."""
    sent = (f"While the long prompt waited and was prefilled ({duration(stall)}), the closed-loop clients "
            f"sent {closed_sent} request{'s' if closed_sent != 1 else ''} and the open loop {open_sent}, where "
            f"users arriving at the run's rate would have sent {expected:.1f}")
    if open_worst > 1.1 * closed_worst:
        return (f"{sent}. Leaving the long request itself out, the open loop's worst TTFT was "
                f"{duration(open_worst)}, the closed loop's {duration(closed_worst)}: requests that arrive while the "
                "server is busy (in a stall, or in a burst of arrivals) wait it out, and a closed loop never "
                "sends them")
    if closed_worst > 1.1 * open_worst:
        return (f"{sent}. Leaving the long request itself out, the closed loop's worst TTFT was the larger here, "
                f"{duration(closed_worst)} against {duration(open_worst)}: its clients all send their first "
                "requests at once, and that burst cost more than the stall did. What it hid is in the counts: "
                "the requests that would have arrived during the stall were never sent")
    return (f"{sent}. Leaving the long request itself out, the worst TTFTs came out close "
            f"({duration(open_worst)} open, {duration(closed_worst)} closed): too few arrivals fell in the "
            "stall to show in the tail this time. The gap grows with the stall and with the rate")


def percentile_spread(p50: tuple[float, float], p99: tuple[float, float]) -> str:
    """How far the median and the p99 moved across resampled reruns of one run: (low, high) of each, s."""
    w50, w99 = p50[1] - p50[0], p99[1] - p99[0]
    said = (f"the median stayed between {duration(p50[0])} and {duration(p50[1])}, the p99 between "
            f"{duration(p99[0])} and {duration(p99[1])}")
    if w99 > 1.5 * w50:
        return (f"{said}, a range {w99 / w50:.1f} times as wide. The tail of a few dozen requests rests on "
                "the one or two slowest, and moves with them")
    return (f"{said}: here the p99 was about as steady as the median, which is this run's luck. A tail of a "
            "few dozen requests rests on the one or two slowest, and usually moves with them")

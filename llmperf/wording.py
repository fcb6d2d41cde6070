"""The few words every chapter's sentences are built from: a ratio, a trend, a change of speed, a duration.

The chapters run on whatever the reader has: a laptop CPU, a GPU, a busy shared
machine. A sentence such as "the step time stays nearly flat" is true on one
and false on another, so no chapter types it. Each chapter's module takes the
numbers it measured (or predicted) and returns the clause those numbers
support, with the numbers in it; these helpers give those clauses one voice.

Pure Python: no torch. Every ratio is "new ÷ old" unless the name says otherwise.
"""

from __future__ import annotations

SAME = 0.05  # ratios within 5 % of 1 are called "about the same": below what these runs can resolve


def times(x: float) -> str:
    """A ratio as text: 2.3 -> "2.3 times", 1.04 -> "1.04 times" (two decimals below 2)."""
    return f"{x:.2f} times" if x < 2 else f"{x:.1f} times"


def trend(first: float, last: float, at_first: str, at_last: str, tol: float = 0.1) -> str:
    """How a factor moved over a sweep: "shrinks from 1.9 at batch 1 to 1.4 at batch 64", "grows ...", or
    "stays near ..." when the two are within `tol` of each other."""
    if abs(last / first - 1) <= tol:
        return f"stays near {first:.1f} ({first:.1f} {at_first}, {last:.1f} {at_last})"
    verb = "shrinks" if last < first else "grows"
    return f"{verb} from {first:.1f} {at_first} to {last:.1f} {at_last}"


def speed_change(old_time: float, new_time: float, than: str) -> str:
    """Compare two times of the same work: "1.52 times faster than X", "1.31 times slower than X" or
    "about as fast as X", where X is `than`, the thing that took `old_time`."""
    ratio = old_time / new_time
    if abs(ratio - 1) <= SAME:
        return f"about as fast as {than}"
    return f"{times(ratio)} faster than {than}" if ratio > 1 else f"{times(1 / ratio)} slower than {than}"


def duration(seconds: float) -> str:
    """A time with a unit that suits it: 0.0385 -> "38.5 ms", 6.7e-05 -> "67 µs", 2.5 -> "2.50 s". A time that
    rounds up to the next unit takes it: 0.99999 s -> "1.00 s", not "1000.0 ms"."""
    if round(seconds * 1e3, 1) >= 1000:
        return f"{seconds:.2f} s"
    if round(seconds * 1e6) >= 1000:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs" if round(seconds * 1e6, 1) >= 10 else f"{seconds * 1e6:.1f} µs"

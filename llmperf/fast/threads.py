"""A decode step's thread count, chosen again while the steps run, from the times of the steps themselves: the
batch-1 step's (`NumpyDecodeStep.adaptive`) and a batch step's, one count per batch size
(`NumpyDecodeStep.batch_count`).

A memory-bound product is split among threads, and it ends when the last thread ends: every one of the step's
products (four a layer, and the head) waits for the slowest thread. `choices.measured_threads` finds the count
that runs fastest on this host, measured once and saved. But a machine's load changes while a program runs:
another program busy on one core, or a virtual machine's host giving a core's time to another guest (Linux
counts that as "steal" in /proc/stat). A thread that loses its core for a few milliseconds holds up every product
in that time, so on a loaded machine fewer threads than the measured best can run a step faster.

`ThreadCount` keeps two counts: the measured best, and one other (half as many, or every core where the best is
one thread). After each step it is told how long the step took (`record`), and it keeps each count's
last `WINDOW` times. It runs one count at a time and tries the other for a single step (a probe):

- once, when the first window is full (the load may have been there from the start);
- when the running count's median has grown past `SLOWER` times its usual median (a load arrived);
- every `PROBE_EVERY` steps while it runs a count other than the measured best (the load may have gone).

A probe faster than the running count's median wins: its count runs from the next step on. A probe that loses
makes the running count's present median its usual one (the steps are slower for another reason, a longer
context, and the other count would not help); after that the usual median only falls, to the lowest seen. So on
a quiet machine it runs the measured best, at the cost of one probe; under a steady load it settles on whichever
count the load lets run faster. (A best that was measured under a load since gone loses its first probe to the other
count, which then runs, with the best probed every `PROBE_EVERY` steps.)

Plain Python and no NumPy: a step's time is all it reads.
"""

from __future__ import annotations

import collections
import statistics

WINDOW = 8
"""Steps whose times make a count's median: enough that one slow step (a page fault, a timer) moves nothing."""

SLOWER = 1.3
"""How much slower than usual the running count's median must be before the other count is tried."""

PROBE_EVERY = 32
"""Steps between two probes of the measured best while another count runs."""


def other_count(best: int, cores: int) -> int:
    """The count tried beside the measured `best` on a machine with `cores` cores: half as many, or every core
    where `best` is 1 (1 again on one core: nothing to try, `ThreadCount.adapts` is False)."""
    if best > 1:
        return best // 2
    return cores


class ThreadCount:
    """The thread count for the next step of one kind (`now`), changed by the times of the steps (`record`).

    Invariants: `now()` is `best` or `other`; the count it runs stays until a probe of the other count is faster
    than its median, so a switch is always to a count just measured faster. `switches` and `probes` count
    both, for a benchmark or a test to read."""

    def __init__(self, best: int, other: int):
        if best < 1 or other < 1:
            raise ValueError(f"Thread counts are at least 1, not {best} and {other}.")
        self.best, self.other = best, other
        self.running = best
        self.times = {best: collections.deque(maxlen=WINDOW), other: collections.deque(maxlen=WINDOW)}
        self.usual: dict[int, float | None] = {best: None, other: None}
        self.probing: int | None = None  # the count the next step tries, if any
        self.since_probe = 0  # steps run since the last probe
        self.probes = self.switches = 0

    @property
    def adapts(self) -> bool:
        """Whether there is another count to try (not where both counts are the same)."""
        return self.best != self.other

    def now(self) -> int:
        """The threads the next step runs its products on."""
        return self.probing or self.running

    def median(self, count: int) -> float:
        """The median of `count`'s last WINDOW steps, in seconds."""
        return statistics.median(self.times[count])

    def record(self, seconds: float) -> None:
        """The step just run on `now()` threads took `seconds`."""
        if not self.adapts:
            return
        if self.probing is not None:
            self._judge(self.probing, seconds)
            return
        window = self.times[self.running]
        window.append(seconds)
        self.since_probe += 1
        if len(window) < WINDOW:
            return
        usual = self.usual[self.running]
        if usual is None:  # the first full window at this count
            self.usual[self.running] = self.median(self.running)
            if self.probes == 0:
                self.probing = self._not_running()
        elif self.median(self.running) > SLOWER * usual:  # slower than usual: a load may have arrived
            self.probing = self._not_running()
        elif self.running != self.best and self.since_probe >= PROBE_EVERY:  # the load may have gone
            self.probing = self.best
        else:  # the usual median is the lowest seen: a load that goes and comes back is seen again
            self.usual[self.running] = min(usual, self.median(self.running))

    def _not_running(self) -> int:
        return self.other if self.running == self.best else self.best

    def _judge(self, count: int, seconds: float) -> None:
        self.probing, self.since_probe = None, 0
        self.probes += 1
        if seconds < self.median(self.running):  # the probe won: its count runs, measured afresh
            self.running = count
            self.times[count].clear()
            self.times[count].append(seconds)
            self.usual[count] = None
            self.switches += 1
        else:  # it lost: this is the running count's usual speed now
            self.usual[self.running] = self.median(self.running)

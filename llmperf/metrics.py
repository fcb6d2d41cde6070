"""Latency metrics from timestamps, as the serving benchmarks define them.

Pure Python (no torch): the input is a request's timestamps, in seconds on one
clock (time.perf_counter()), and nothing else. The definitions are those of
vLLM's benchmark, MLPerf Inference and NVIDIA GenAI-Perf
(shared/reference/facts.md):

- TTFT, time to first token = first token's arrival − the moment the request
  was sent. It includes any queueing and the whole prefill.
- E2E, end-to-end latency = last token's arrival − the moment it was sent.
- TPOT, time per output token = (E2E − TTFT) / (n − 1) for n output tokens: the
  mean gap after the first token. Not defined for n = 1 (None here), and it
  leaves TTFT out, so a slow prefill does not hide in it.
- ITL, inter-token latencies = every gap between successive tokens (n − 1 of
  them); TPOT is their mean.

A token is a token: a server that streams several tokens in one chunk must be
timed per token, not per chunk, or n is undercounted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestTimes:
    """One request: when it was sent, and when each of its output tokens arrived (seconds, one clock)."""

    sent: float
    token_times: Sequence[float]

    def __post_init__(self):
        times = tuple(float(t) for t in self.token_times)  # a list becomes an immutable tuple
        if not times:
            raise ValueError("A request with no output tokens has no TTFT, TPOT or E2E latency. Count it as "
                             "failed (or empty) instead of passing it here.")
        if times[0] < self.sent:
            raise ValueError(f"The first token arrived at {times[0]}, before the request was sent at {self.sent}: "
                             "the timestamps must come from one clock (time.perf_counter()).")
        if any(b < a for a, b in zip(times, times[1:])):
            raise ValueError("Token arrival times must not decrease: pass them in the order the tokens arrived.")
        object.__setattr__(self, "token_times", times)

    @property
    def n_tokens(self) -> int:
        """Output tokens received."""
        return len(self.token_times)

    @property
    def ttft(self) -> float:
        """Time to first token (s): first arrival − sent."""
        return self.token_times[0] - self.sent

    @property
    def e2e(self) -> float:
        """End-to-end latency (s): last arrival − sent."""
        return self.token_times[-1] - self.sent

    @property
    def tpot(self) -> float | None:
        """Time per output token (s): (E2E − TTFT) / (n − 1); None for a one-token answer."""
        if self.n_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.n_tokens - 1)

    @property
    def itl(self) -> list[float]:
        """Inter-token latencies (s): the n − 1 gaps between successive tokens."""
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]

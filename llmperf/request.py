"""A request to the serving loop (`llmperf.engine`): what was asked, and what came back and when.

The engine fills in its tokens, each with the time it existed (`time.perf_counter()`), and how it ended; the
server (`llmperf.serve`) and chapter 6's metrics read them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Request:
    """One request: what was asked, and (filled in by the engine) what came back and when."""

    prompt: Sequence[int]
    max_tokens: int
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float = 1.0
    stop_ids: Sequence[int] = ()
    seed: int | None = None
    id: int = field(default_factory=itertools.count().__next__)
    sent: float = 0.0  # perf_counter() when submitted
    admitted: float = 0.0  # perf_counter() when its prefill began (its wait in the queue ends)
    tokens: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    finish_reason: str | None = None  # "length", "stop", "cancelled" or "error"
    error: str | None = None  # with finish_reason "error": what failed
    preemptions: int = 0  # times its KV blocks were taken back, to be prefilled again (by the scheduler)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

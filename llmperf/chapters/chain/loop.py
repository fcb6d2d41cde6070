"""Chapter 1's greedy loop as the package runs it (`generation.stream`: the prompt prefilled once, then one
decode pass per token, each token stamped), and the check that the page's own loop agrees with `generate`."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from ...generation import generate, stream
from ...metrics import RequestTimes

LOOP_MARGIN = 2.0  # the shown loop's median pass may sit this many times above or below the package's TPOT


def timed_greedy(model, prompt_ids: list[int], n_new: int) -> tuple[list[int], list[float]]:
    """Greedy decoding with the KV cache: `n_new` tokens, and the seconds of each of the n_new − 1 decode
    passes after the prefill's first token. `stream` runs the loop and stamps each token once it is on the
    host; a pass's seconds are the gap between its token's stamp and the one before."""
    arrivals = list(stream(model, prompt_ids, n_new))
    stamps = [t for _, t in arrivals]
    return [token for token, _ in arrivals], [b - a for a, b in zip(stamps, stamps[1:])]


@dataclass
class LoopCheck:
    """The page's loop against the package: its tokens and `generate`'s for the same prompt, the median of its
    passes' seconds and the TPOT of `rounds` streamed runs of the same request (their median, seconds)."""

    prompt_len: int
    tokens: list[int]
    reference: list[int]
    pass_seconds: list[float]
    tpot: float
    margin: float = LOOP_MARGIN

    @property
    def pass_median(self) -> float:
        return statistics.median(self.pass_seconds)

    @property
    def ratio(self) -> float:
        """The shown loop's median pass ÷ the package's TPOT."""
        return self.pass_median / self.tpot

    def numbers(self) -> dict:
        return {"loop_tokens": len(self.tokens), "loop_passes": len(self.pass_seconds),
                "loop_pass_ms": self.pass_median * 1e3, "loop_tpot_ms": self.tpot * 1e3,
                "loop_ratio": self.ratio, "loop_margin": self.margin}

    def check(self) -> None:
        assert self.tokens == self.reference, "the shown loop's tokens differ from generate()'s"
        assert 1 / self.margin <= self.ratio <= self.margin, (
            f"the shown loop's median pass is {self.ratio:.2f}x the package's TPOT (allowed: within "
            f"{self.margin:.1f}x either way)")


def check_loop(s, prompt_ids: list[int], tokens: list[int], pass_seconds: list[float],
               rounds: int = 3) -> LoopCheck:
    """Set the page's loop (its `tokens` and `pass_seconds`) beside `generate` and the TPOT of `stream`."""
    if len(pass_seconds) != len(tokens) - 1 or not pass_seconds:
        raise ValueError(f"{len(tokens)} tokens come from a prefill and {len(tokens) - 1} decode passes; got "
                         f"{len(pass_seconds)} pass times.")
    reference = generate(s.model, prompt_ids, len(tokens)).tolist()
    tpots = []
    for _ in range(rounds):
        sent = time.perf_counter()
        tpots.append(RequestTimes(sent, [t for _, t in stream(s.model, prompt_ids, len(tokens))]).tpot)
    return LoopCheck(len(prompt_ids), list(tokens), reference, list(pass_seconds), statistics.median(tpots))

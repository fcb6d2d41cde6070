"""Multi-turn conversations against the course's server, prefix caching on and off.

Each conversation's turn k carries the whole conversation so far (`bench.conversations`, token ids): the earlier
turns' prompts, each answer's place held by stand-in ids, then `added` new ids. With prefix caching, the server
finds the full blocks of the previous turn's prompt (named when that prompt was prefilled) and prefills only the
rest; the answer's blocks hold the tokens the model made, not the stand-ins, so they are not found. Predicted
exactly, as vLLM counts hits (in tokens): turn 1 finds nothing; turn k finds
block_size × ⌊(turn k − 1's prompt) ÷ block_size⌋ tokens. The pool is sized so that no cached block is lent
again during the run, and the conversations go one at a time (one client), so that each TTFT is one turn's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ... import bench, metrics
from ...fast import served
from ...metrics import RequestRecord
from ...scheduler import blocks_for
from ...serve import background, create_app
from ..setup import Setup, Sizes
from . import cache_claims
from .served import NAME, synchronously

TURNS, CONVERSATIONS = 4, 3
BLOCK_SIZE = 16


@dataclass(frozen=True)
class Dialogue:
    """The conversations' shape: an `opening` prompt, then `turns` − 1 turns each adding `added` ids after an
    answer of `answer` tokens, in `conversations` conversations; blocks of `block_size` positions."""

    opening: int
    added: int
    answer: int
    turns: int = TURNS
    conversations: int = CONVERSATIONS
    block_size: int = BLOCK_SIZE

    @property
    def prompts(self) -> list[int]:
        """Each turn's prompt, in tokens: the opening, then each time the answer and the new ids added."""
        return [self.opening + (k - 1) * (self.answer + self.added) for k in range(1, self.turns + 1)]

    @property
    def hits(self) -> list[int]:
        """Tokens each turn finds in the prefix cache: the full blocks of the turn before's prompt."""
        return [0] + [p // self.block_size * self.block_size for p in self.prompts[:-1]]

    def prefilled(self, caching: bool) -> list[int]:
        """Positions each turn prefills."""
        return [p - h for p, h in zip(self.prompts, self.hits)] if caching else list(self.prompts)

    @property
    def hit_rate(self) -> float:
        """Tokens found ÷ prompt tokens looked up, over every turn (vLLM's prefix-cache hit rate)."""
        return sum(self.hits) / sum(self.prompts)

    def numbers(self) -> dict[str, object]:
        """What the prose says before the runs: the conversations' shape and the predicted hit rate (%)."""
        return {"turn_n": self.conversations, "turn_k": self.turns, "turn_opening": self.opening,
                "turn_added": self.added, "turn_answer": self.answer, "turn_hit_pred": 100 * self.hit_rate}

    @property
    def pool(self) -> int:
        """Blocks enough for every turn of every conversation without lending a block twice."""
        return self.conversations * sum(blocks_for(p + self.answer, self.block_size) for p in self.prompts)


def dialogue(sizes: Sizes) -> Dialogue:
    """Openings of 4 × the device's `serve_prompt` tokens, turns adding 2 × as many, answers of a quarter as many."""
    p = sizes.serve_prompt
    return Dialogue(opening=4 * p, added=2 * p, answer=max(2, p // 4))


@dataclass
class TurnRun:
    """One server's records of every turn (`turn` set) and its /metrics counts over the run: prompt tokens looked
    up in the prefix cache and found there."""

    caching: bool
    records: list[RequestRecord]
    queries: float
    hits: float

    def ttft(self, turn: int) -> float:
        """The median TTFT of turn `turn`'s requests (s)."""
        return metrics.percentile([r.times.ttft for r in self.records if r.turn == turn and r.ok], 50)


@dataclass
class Turns:
    """The same conversations against two servers, prefix caching off and on."""

    shape: Dialogue
    off: TurnRun
    on: TurnRun

    def numbers(self) -> dict[str, object]:
        d, last = self.shape, self.shape.turns
        return {"turn_hit_on": 100 * self.on.hits / self.on.queries, "turn_hits_on": self.on.hits,
                "turn_queries": self.on.queries,
                "turn_gain_text": cache_claims.turns_gain(self.on.ttft(last), self.off.ttft(last), last,
                                                          d.prefilled(True)[-1], d.prefilled(False)[-1])}

    def table(self):
        """One row per turn: prompt tokens, tokens found cached (predicted), positions prefilled without and with
        the cache, and the median TTFT of each server (ms)."""
        d = self.shape
        rows = [{"turn": k, "prompt (tokens)": p, "found cached (tokens)": h,
                 "prefilled, cache off": off, "prefilled, cache on": on,
                 "median TTFT, cache off (ms)": self.off.ttft(k) * 1e3,
                 "median TTFT, cache on (ms)": self.on.ttft(k) * 1e3}
                for k, p, h, off, on in zip(range(1, d.turns + 1), d.prompts, d.hits, d.prefilled(False),
                                            d.prefilled(True))]
        return pd.DataFrame(rows).set_index("turn").style.format(precision=1, thousands=",")

    def check(self) -> None:
        """Every turn answered, with the prompt lengths predicted; with the cache on, /metrics counted every prompt
        token as a query and exactly the tokens predicted as hits; with it off, neither."""
        d = self.shape
        for run in (self.off, self.on):
            assert len(run.records) == d.conversations * d.turns and all(r.ok for r in run.records), (
                f"cache {'on' if run.caching else 'off'}: {sum(r.ok for r in run.records)} of "
                f"{d.conversations * d.turns} turns answered")
            assert [r.input_tokens for r in run.records] == d.prompts * d.conversations
        assert self.off.queries == self.off.hits == 0, "a disabled prefix cache was looked up"
        assert self.on.queries == d.conversations * sum(d.prompts), (
            f"{self.on.queries:,.0f} prompt tokens looked up; {d.conversations * sum(d.prompts):,} were sent")
        assert self.on.hits == d.conversations * sum(d.hits), (
            f"the prefix cache found {self.on.hits:,.0f} tokens; predicted {d.conversations * sum(d.hits):,}")


async def _talk(url: str, conversations: list, answer: int, label: str) -> tuple[list[RequestRecord], tuple]:
    async with bench.scrape_metrics(url, interval=0.5) as view:
        records = await bench.run(url, NAME, conversations, answer, concurrency=1, label=label)
    return records, view.prefix_cache


def turn_runs(s: Setup, seed: int = 0) -> Turns:
    """The same conversations (`dialogue`'s shape, random ids) against two fresh servers of the fused model, one
    client at a time: prefix caching off, then on."""
    d, model, vocab = dialogue(s.sizes), served(s.model), s.model.cfg.vocab_size
    openings = bench.synthetic_prompts(d.conversations, d.opening, vocab, seed=seed)
    conversations = bench.conversations.from_ids(openings, d.turns, [d.added] * d.conversations, vocab, seed + 1)
    runs = {}
    for caching in (False, True):
        app = create_app(model, s.tokenizer, max_num_seqs=1, max_model_len=d.prompts[-1] + d.answer,
                         block_size=d.block_size, num_blocks=d.pool, enable_prefix_caching=caching)
        with background(app) as server:
            records, (queries, hits) = synchronously(_talk(server.url, conversations, d.answer,
                                                           f"cache {'on' if caching else 'off'}: conversations"))
        runs[caching] = TurnRun(caching, records, queries, hits)
    return Turns(d, runs[False], runs[True])

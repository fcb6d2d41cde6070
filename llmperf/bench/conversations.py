"""Multi-turn conversations: each request carries everything said before it, as a chat client sends it.

A chat user asks, reads the answer, asks again; every new request holds the whole conversation so far. A server
with a prefix cache (vLLM's automatic prefix caching, SGLang's radix cache) keeps the keys and values of the
earlier turns and prefills only the new part; one without it prefills the whole history again, so each turn's
TTFT grows with the conversation. vLLM's multi-turn benchmark and SGLang's `bench_multiturn` load a server
this way; so does `llmperf.bench --turns N`.

A `Conversation` is the user's turns, in order. `converse` sends them one after another on one connection, each
when the last answer has ended (no think time): turn k's request is

- chat: every earlier user message and the assistant's answer to it, as text, then the new message;
- completions (token ids): every earlier turn's ids, each followed by as many ids as its answer had, then the
  new turn's ids. A stream returns text, not ids, so the answer's place is held by stand-in ids (the same on
  every run): a prefix cache can reuse the earlier turns' prompts, but not the answers.

A failed turn ends its conversation. Each turn is one `RequestRecord`, with `turn` its place (1, 2, ...);
`by_turn` reads TTFT by turn, where a prefix cache shows.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import httpx

from ..metrics import RequestRecord, stats
from .client import send


class Conversation(tuple):
    """The user's turns of one conversation, in order: each a message (text) or token ids."""


def from_lines(lines: Sequence[str], n: int, turns: int) -> list[Conversation]:
    """`n` conversations of `turns` messages each, from a prompts file's lines taken in order (cycled)."""
    if turns < 1 or n < 1 or not lines:
        raise ValueError(f"Need turns >= 1, n >= 1 and some lines; got {turns}, {n} and {len(lines)} lines.")
    return [Conversation(lines[(i * turns + k) % len(lines)] for k in range(turns)) for i in range(n)]


def from_ids(openings: Sequence[Sequence[int]], turns: int, sizes: Sequence[int], vocab: int = 32_000,
             seed: int = 0) -> list[Conversation]:
    """One conversation per opening prompt (token ids): the opening, then `turns` − 1 turns of `sizes[i]` new
    random ids each (ids 1000..vocab-1), drawn from `seed`."""
    if turns < 1 or len(sizes) != len(openings) or any(s < 1 for s in sizes):
        raise ValueError(f"Need turns >= 1 and a size >= 1 per opening; got {turns} turns, {len(sizes)} sizes for "
                         f"{len(openings)} openings.")
    rng = random.Random(seed)
    return [Conversation([list(opening)] + [[rng.randrange(1000, vocab) for _ in range(size)]
                                            for _ in range(turns - 1)]) for opening, size in zip(openings, sizes)]


def stand_in(n: int) -> list[int]:
    """The ids that hold an answer's place in a token-id history: n ordinary ids, the same on every run."""
    return [1000 + (7 * j) % 997 for j in range(n)]


async def converse(client: httpx.AsyncClient, url: str, model: str, conversation: Conversation, max_tokens: int,
                   chat: bool = False, ignore_eos: bool = True) -> list[RequestRecord]:
    """Send the conversation's turns one after another, each with the whole history (the module's docstring);
    one record per turn sent, `turn` set. Stops at the first failed turn."""
    records: list[RequestRecord] = []
    messages: list[dict] = []
    history: list[int] = []
    for k, said in enumerate(conversation, start=1):
        if chat:
            messages.append({"role": "user", "content": said})
            prompt = list(messages)
        else:
            prompt = history + list(said)
        text: list[str] = []
        record = await send(client, url, model, prompt, max_tokens, chat, ignore_eos=ignore_eos, text=text)
        records.append(replace(record, turn=k))
        if not record.ok:
            break
        if chat:
            messages.append({"role": "assistant", "content": "".join(text)})
        else:
            history = prompt + stand_in(record.output_tokens or len(record.token_times))
    return records


def by_turn(records: Sequence[RequestRecord], method: str = "linear") -> str:
    """One line per turn: how many completed, their mean prompt tokens (the server's count) and TTFT's mean and
    median. Where a prefix cache works, later turns' TTFT stays near the first's while their prompts grow."""
    lines = []
    for k in sorted({r.turn for r in records if r.turn}):
        done = [r for r in records if r.turn == k and r.ok]
        if not done:
            lines.append(f"turn {k}: none completed")
            continue
        ttft = stats([r.times.ttft for r in done], method)
        prompt = sum(r.input_tokens for r in done) / len(done)
        lines.append(f"turn {k}: {len(done)} completed, prompts of {prompt:,.0f} tokens on average, TTFT mean "
                     f"{ttft.mean * 1e3:,.1f} ms, median {ttft.median * 1e3:,.1f} ms")
    return "\n".join(lines)

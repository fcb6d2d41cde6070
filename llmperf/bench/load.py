"""How a load generator loads a server: when each request is sent, and how many may be in flight.

Three ways, as vLLM's, SGLang's and AIPerf's benchmarks offer them:

- open loop (`rate`): requests arrive at times drawn in advance, whatever the server is doing. The gaps come
  from a gamma distribution with mean 1/rate and shape `burstiness` (1 is a Poisson process; below 1, burstier),
  as vLLM's benchmark draws them. A slow server builds a queue, and the latencies show it.
- closed loop (`concurrency`): that many clients, each sending its next request when its last one ends. A slow
  server slows the clients down, so the load adapts to the server and hides how long a request would have
  waited had it come on time ("coordinated omission"). Chapter 6 shows the difference.
- both (`rate` and `concurrency`): requests arrive at the rate, but at most `concurrency` are in flight; one
  that arrives when all are busy waits in the client for a free one. That wait is recorded apart
  (`RequestRecord.queued`) and left out of its TTFT and E2E, which start when it is sent, as vLLM reports it.

`warmups` requests go first, and are thrown away: the first requests to a fresh server pay for what it sets up
on first use (allocations, compiled kernels, caches). Whether the sender kept to the rate asked for is
`achieved_rate`: arrivals per second over the run, from the records.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import random
import time
from collections.abc import Sequence
from dataclasses import replace

import httpx

from ..metrics import RequestRecord
from ..progress import progress
from . import workloads
from .client import send
from .conversations import Conversation, converse


def arrival_gaps(rate: float, n: int, burstiness: float = 1.0, seed: int = 0, exact: bool = False) -> list[float]:
    """Seconds between n successive request sends at `rate` requests/s: gamma-distributed with mean 1/rate and
    shape `burstiness` (1: exponential gaps, a Poisson process). rate = inf sends them all at once.

    A few dozen draws average well off 1/rate (±20 % is common), so a short run arrives at another rate than
    the one asked. `exact` scales all n gaps by one factor so that the n − 1 between the n arrivals average
    exactly 1/rate: the gaps keep their shape, and the run arrives at the rate asked (a sweep needs its points
    at the rates it names)."""
    if rate <= 0 or burstiness <= 0 or n < 0:
        raise ValueError(f"Need rate > 0, burstiness > 0 and n >= 0; got {rate}, {burstiness}, {n}.")
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    gaps = [rng.gammavariate(burstiness, 1 / (rate * burstiness)) for _ in range(n)]
    if exact and n > 1:
        scale = (n - 1) / (rate * sum(gaps[1:]))
        gaps = [g * scale for g in gaps]
    return gaps


def synthetic_prompts(n: int, input_len: int, vocab: int = 32_000, seed: int = 0) -> list[list[int]]:
    """n prompts of exactly `input_len` random token ids (ids 1000..vocab-1: ordinary tokens in most
    vocabularies). Sent as token ids, they have the same length on any server whatever its tokenizer."""
    if n < 1 or input_len < 1:
        raise ValueError(f"Need n >= 1 and input_len >= 1; got {n} and {input_len}.")
    return workloads.prompts([input_len] * n, vocab, seed=seed)


def achieved_rate(records: Sequence[RequestRecord]) -> float | None:
    """Requests per second at which the run's requests arrived (before any wait for a slot): n − 1 gaps over
    the span from the first arrival to the last; None for fewer than two requests, inf if all came at once. A
    conversation arrives once, with its first turn (the rate and the cap count conversations)."""
    arrivals = sorted(r.sent - r.queued for r in records if r.turn <= 1)
    if len(arrivals) < 2:
        return None
    span = arrivals[-1] - arrivals[0]
    return (len(arrivals) - 1) / span if span > 0 else math.inf


@contextlib.asynccontextmanager
async def earlier_objects_frozen():
    """For the length of an `async with`, Python's garbage collector scans only the objects made inside it.

    In a process that holds millions of objects (a notebook that loaded a model, a long test session) one full
    collection takes a large part of a second, and a collection can start at any allocation: in the middle of
    a run it holds every send and every read on the event loop, and an open loop's requests leave late. So
    the objects that exist when the run starts are moved out of the collector's reach (`gc.freeze`) and given
    back to it when the run ends (`gc.unfreeze`); garbage made during the run is still collected. Where
    something else has already frozen objects, they are left as they are.
    """
    ours = gc.get_freeze_count() == 0
    if ours:
        gc.freeze()
    try:
        yield
    finally:
        if ours:
            gc.unfreeze()


async def run(url: str, model: str, prompts: Sequence, max_tokens: "int | Sequence[int]", rate: float | None = None,
              concurrency: int | None = None, burstiness: float = 1.0, duration: float | None = None,
              chat: bool = False, timeout: float = 300.0, seed: int = 0, show_progress: bool = True,
              warmups: int = 0, ignore_eos: bool = True, label: str = "requests",
              exact_rate: bool = False, schedule: Sequence[float] | None = None,
              part: tuple[int, int] = (0, 1), start_at: float | None = None) -> list[RequestRecord]:
    """Send every prompt (or, with `duration`, as many as start within it) at `rate` (open loop), at
    `concurrency` (closed loop), or at `rate` with at most `concurrency` in flight; return the records in the
    order the prompts were given. `max_tokens` is one number for every request, or one per prompt. First,
    `warmups` requests (the first prompts, again), unrecorded, `concurrency` (or one) at a time. `ignore_eos`:
    as `send`. `label` names the progress bar. `exact_rate`: the arrival gaps scaled to the rate asked
    (`arrival_gaps(exact=True)`). `schedule`: instead of a rate, the second after the start at which each prompt is
    sent (a trace's times, not decreasing); `concurrency` then caps the requests in flight. `part` = (I, N): send
    only requests I, I + N, I + 2N, … of the schedule, each at its own time in it (one worker's or one machine's
    share, `scale`). `start_at`: the wall-clock time (`time.time()`) at which the schedule starts, instead of as soon
    as the connections are open; ValueError if that has passed by then.

    A prompt may be a `Conversation`: its turns then go one after another (`conversations.converse`), each
    recorded; the rate and the cap count conversations, and the records come in the conversations' order.

    While it runs, the garbage collector leaves alone the objects made before it (`earlier_objects_frozen`)."""
    if schedule is not None and (len(schedule) != len(prompts) or rate is not None):
        raise ValueError(f"A schedule gives each prompt its time instead of a rate: need one time per prompt and no "
                         f"rate; got {len(schedule)} times for {len(prompts)} prompts, rate {rate}.")
    if rate is None and concurrency is None and schedule is None:
        raise ValueError("Give a rate (open loop), a concurrency (closed loop), or both (a rate with a cap).")
    if rate is not None and not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s (inf sends everything at once), got {rate}.")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}.")
    if warmups < 0:
        raise ValueError(f"warmups must be 0 or more, got {warmups}.")
    if not 0 <= part[0] < part[1]:
        raise ValueError(f"part must be (I, N) with 0 <= I < N, got {part}.")
    lengths = [max_tokens] * len(prompts) if isinstance(max_tokens, int) else list(max_tokens)
    if len(lengths) != len(prompts):
        raise ValueError(f"Got {len(lengths)} max_tokens for {len(prompts)} prompts: give one number, or one each.")
    if warmups:
        await warm_up(url, model, prompts, lengths, warmups, concurrency or 1, chat, timeout, ignore_eos)
    limits = httpx.Limits(max_connections=concurrency or 1000, max_keepalive_connections=concurrency or 100)
    records: list[list[RequestRecord]] = [[] for _ in prompts]
    share, parts = part
    mine = range(share, len(prompts), parts)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0), limits=limits) as client, \
            earlier_objects_frozen():
        await _connect(client, url, concurrency or 1)
        bar = progress(mine, label) if show_progress else None
        start = time.perf_counter()
        if start_at is not None:  # the wall clock's time, on this process's clock
            start, behind = start + start_at - time.time(), time.time() - start_at
            if behind > 0:
                raise ValueError(f"The start time passed {behind:.3f} s before the connections were open: give a "
                                 "later start.")
            await asyncio.sleep(start - time.perf_counter())

        def late() -> bool:
            return duration is not None and time.perf_counter() - start >= duration

        async def request(i: int) -> list[RequestRecord]:
            if isinstance(prompts[i], Conversation):
                return await converse(client, url, model, prompts[i], lengths[i], chat, ignore_eos)
            return [await send(client, url, model, prompts[i], lengths[i], chat, ignore_eos=ignore_eos)]

        async def one(i: int, slots: asyncio.Semaphore | None = None) -> None:
            arrived = time.perf_counter()
            if slots is None:
                records[i] = await request(i)
            else:
                async with slots:
                    records[i] = await request(i)
                first = records[i][0]
                records[i][0] = replace(first, queued=max(first.sent - arrived, 0.0))
            if bar is not None:
                bar.update()

        if rate is not None or schedule is not None:  # open loop: each request at its own time, whatever happens
            slots = asyncio.Semaphore(concurrency) if concurrency is not None else None
            tasks, at = [], start
            gaps = (arrival_gaps(rate, len(prompts), burstiness, seed, exact_rate) if schedule is None
                    else [b - a for a, b in zip([0.0, *schedule], schedule)])
            for i, gap in enumerate(gaps):
                at += gap
                if i % parts != share:
                    continue
                await asyncio.sleep(max(0.0, at - time.perf_counter()))
                if late():
                    break
                tasks.append(asyncio.create_task(one(i, slots)))
            await asyncio.gather(*tasks)
        else:  # closed loop: `concurrency` clients, each waiting for its answer before the next request
            await _closed_loop(concurrency, mine, one, late)
        if bar is not None:
            bar.close()
    return [r for sent in records for r in sent]


async def warm_up(url: str, model: str, prompts: Sequence, lengths: Sequence[int], n: int, concurrency: int = 1,
                  chat: bool = False, timeout: float = 300.0, ignore_eos: bool = True) -> None:
    """Send `n` requests (the first prompts, cycled, each with its length; a conversation's first turn),
    `concurrency` at a time, and forget them: what `run(warmups=n)` does first, apart, so that a caller can start
    its own clocks after it."""
    firsts = [p[0] if isinstance(p, Conversation) else p for p in prompts]
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0)) as client:
        await _closed_loop(min(concurrency, n), range(n), lambda i: send(
            client, url, model, firsts[i % len(firsts)], lengths[i % len(firsts)], chat, ignore_eos=ignore_eos))


async def _connect(client: httpx.AsyncClient, url: str, n: int) -> None:
    """Open `n` connections to the server before any clock starts (n light GET /models at once, answers
    ignored), so that no request's TTFT holds a TCP handshake or the client's own first-use costs (against a
    stub server they made the first requests' TTFT several times the others' error: tests/test_bench_accuracy.py)."""
    async def touch() -> None:
        try:
            await client.get(f"{url}/models")
        except httpx.HTTPError:
            pass  # the run itself will record what is wrong

    await asyncio.gather(*(touch() for _ in range(n)))


async def _closed_loop(clients: int, items, work, late=lambda: False) -> None:
    """`clients` loops, each taking the next of `items` and awaiting `work(item)` until none are left (or
    `late()`)."""
    todo = iter(items)

    async def client_loop() -> None:
        for i in todo:
            if late():
                return
            await work(i)

    await asyncio.gather(*(client_loop() for _ in range(clients)))

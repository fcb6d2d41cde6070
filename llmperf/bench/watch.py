"""Watching a server's own count of requests in flight while a load runs (chapter 6's Little's Law check)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx


@asynccontextmanager
async def watch_in_flight(base: str, interval: float = 0.05) -> AsyncIterator[list[tuple[float, int]]]:
    """Poll `base`/health every `interval` seconds while the `async with` block runs; yield the list it fills
    with (time, requests in flight): active + waiting as `llmperf.serve` counts them (its
    /health). Each poll is timed at the midpoint of its round trip, on the clock the requests' records use.

    Serving engines publish the same count for their operators (vLLM as the Prometheus gauges
    num_requests_running and num_requests_waiting at /metrics); polling it is how the mean number in
    flight is measured without knowing anything about the requests themselves (`scrape` reads them, from
    any server). A failed poll is skipped.
    """
    health = f"{base.rstrip('/')}/health"
    samples: list[tuple[float, int]] = []

    async def read(client: httpx.AsyncClient) -> None:
        before = time.perf_counter()
        state = (await client.get(health)).json()
        samples.append(((before + time.perf_counter()) / 2, int(state["active"]) + int(state["waiting"])))

    if interval <= 0:
        raise ValueError(f"interval must be > 0 seconds, got {interval}.")
    async with httpx.AsyncClient(timeout=10.0) as client:
        try:
            await read(client)  # fail now, before the run, if there is nothing to watch
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"Cannot watch {health} ({type(e).__name__}: {e}). It must be llmperf.serve's "
                             "/health, which reports 'active' and 'waiting'.") from None
        async with polling(interval, lambda: read(client)):
            yield samples


@asynccontextmanager
async def polling(interval: float, sample) -> AsyncIterator[None]:
    """Await `sample()` every `interval` seconds while the `async with` block runs (in a task of its own, which
    the block's end cancels). A sample that fails (no answer, or not the answer expected) is skipped: the
    quantity sampled is then held from the sample before."""
    async def every() -> None:
        while True:
            before = time.perf_counter()
            try:
                await sample()
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                pass
            await asyncio.sleep(max(0.0, interval - (time.perf_counter() - before)))

    task = asyncio.create_task(every())
    try:
        yield
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

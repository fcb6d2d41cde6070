"""What every served run of chapter 6 shares: the model's name on the server, the requests' lengths, and
how a load is sent to a server started in this process and watched while it runs.

The load generator (`llmperf.bench`) is asynchronous; the chapter's experiment functions are not, so
that any program can call them: a unit test, the notebook (whose kernel already runs an event loop) and
the reference run. `synchronously` runs the client's event loop to completion in either case.
"""

from __future__ import annotations

import asyncio
import random
from concurrent.futures import ThreadPoolExecutor

from ... import bench
from ...metrics import RequestRecord

NAME = "smollm2-135m-instruct"  # the model name the server answers to


def synchronously(coroutine):
    """Run `coroutine` to completion and return its result: on this thread when no event loop runs here, else
    (in a notebook) on a thread of its own, with its own loop, while this one waits."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _watched(server, prompts, lengths, show_progress: bool, how: dict):
    # The server's own count, from its Prometheus /metrics every 50 ms: vllm:num_requests_running + waiting.
    async with bench.scrape_metrics(server.url, interval=0.05) as view:
        requests = await bench.run(server.url, NAME, prompts, lengths, show_progress=show_progress, **how)
    return requests, list(view.in_flight)


def watched_load(server, prompts, lengths, show_progress: bool = True, **how
                 ) -> tuple[list[RequestRecord], list[tuple[float, float]]]:
    """Send `prompts` (asking `lengths` tokens each) to `server` (a `serve.background` one) with
    `bench.run`, closed loop (`concurrency=`) or open loop (`rate=`, `seed=`), while `bench.scrape_metrics`
    reads the server's count of requests in flight from its /metrics, as an operator's Prometheus would (the
    gauges vLLM names num_requests_running and num_requests_waiting). Returns the requests' records, in the
    prompts' order, and the scraped (time, count) pairs."""
    return synchronously(_watched(server, prompts, lengths, show_progress, how))


def unwatched_load(server, prompts, lengths, **how) -> list[RequestRecord]:
    """Send `prompts` to `server` with `bench.run`, unwatched and without a progress bar; their records."""
    return synchronously(bench.run(server.url, NAME, prompts, lengths, show_progress=False, **how))


def request_lengths(n: int, longest: int, seed: int = 0) -> list[int]:
    """Tokens each of `n` requests asks for: uniform from 2 to `longest`, as real answers vary (random, seeded)."""
    rng = random.Random(seed)
    return [rng.randint(2, longest) for _ in range(n)]


def matching_seed(rate: float, n: int, tries: int = 20) -> int:
    """The seed, of 0..tries-1, whose `n` arrival gaps (`bench.arrival_gaps`) average closest to 1/`rate`: an
    open loop drawn with it offers `rate` requests/s over its `n` requests, not just in expectation."""
    return min(range(tries), key=lambda seed: abs(sum(bench.arrival_gaps(rate, n, seed=seed)) * rate / n - 1))


"""A server's own view of a run: its Prometheus /metrics, scraped while the load runs, read beside the client's.

vLLM, SGLang, TGI and `llmperf.serve` publish at /metrics how many requests they hold (running and waiting) and
how many tokens they have taken in and put out. AIPerf and guidellm scrape it and report it beside their own
numbers; so does `llmperf.bench`. Two checks come of it:

- Little's Law, made general: the server's own mean count in flight (its gauges, time-averaged over the run)
  against λ·W from the client's timestamps (`metrics.littles_law_polled`). Chapter 6 makes the same check
  against llmperf.serve's /health.
- the tokens the server counted against the `usage` the clients were told.

Where the server counts them under vLLM V1's names (vLLM and `llmperf.serve` do), the run's prefix-cache hit rate
(prompt tokens found cached ÷ prompt tokens looked up, as vLLM counts both) and its preemptions are read too.

Names differ by server (`SERVERS`); the first whose running-requests gauge /metrics carries is the one read.
Samples of the same name (one per label set: a model, a finish reason) are summed.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ..metrics import RequestRecord, littles_law_polled
from .watch import polling

# server: (running gauge, waiting gauge, prompt tokens counter, generated tokens counter)
SERVERS = {
    "vLLM (and llmperf.serve)": ("vllm:num_requests_running", "vllm:num_requests_waiting",
                                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total"),
    "SGLang": ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:prompt_tokens_total",
               "sglang:generation_tokens_total"),
    "TGI": ("tgi_batch_current_size", "tgi_queue_size", "tgi_request_input_length_sum",
            "tgi_request_generated_tokens_sum"),
}


# vLLM V1's prefix cache and preemption counters: (queries, hits, preemptions)
CACHE = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total")

WANTED = frozenset(name for names in SERVERS.values() for name in names) | set(CACHE)  # every sample a view reads


def parse(text: str, wanted: frozenset[str] | None = None) -> dict[str, float]:
    """Prometheus's text format as {sample name: value}, the values of a name's label sets summed. With
    `wanted`, only those samples are parsed (a server's histograms are most of its /metrics, and polling at
    20 Hz should cost the machine under test little)."""
    if wanted is not None:
        text = "".join(line + "\n" for line in text.splitlines()
                       if line and line[0] != "#" and line.split("{", 1)[0].split(" ", 1)[0] in wanted)
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def root_of(base: str) -> str:
    """The server's root from the API's base URL: where /metrics is (http://host:8000/v1 -> http://host:8000)."""
    return base[:-3] if base.endswith("/v1") else base


@dataclass
class ServerView:
    """What a server's /metrics said during a run: its kind, its count in flight as (time, running + waiting)
    samples, and its token counters before and after."""

    server: str
    names: tuple[str, str, str, str]
    before: dict[str, float]
    after: dict[str, float] = field(default_factory=dict)
    in_flight: list[tuple[float, float]] = field(default_factory=list)

    def grew(self, i: int) -> float | None:
        """How much counter i of `names` (2: prompt tokens, 3: generated tokens) grew over the run."""
        return self.counted(self.names[i])

    def counted(self, name: str) -> float | None:
        """How much the counter `name` grew over the run; None if the server does not publish it."""
        return self.after[name] - self.before[name] if name in self.after and name in self.before else None

    @property
    def prefix_cache(self) -> tuple[float, float] | None:
        """(prompt tokens looked up in the prefix cache, tokens found) over the run, or None if not published."""
        queries, hits = self.counted(CACHE[0]), self.counted(CACHE[1])
        return None if queries is None or hits is None else (queries, hits)

    @property
    def preemptions(self) -> float | None:
        """Requests preempted over the run (blocks taken back, to be prefilled again), or None if not published."""
        return self.counted(CACHE[2])

    def report(self, records: Sequence[RequestRecord]) -> str:
        """The server's numbers beside the client's, in words."""
        lines = [f"the server's own count (/metrics, {self.server}):"]
        if any(r.ok for r in records) and self.in_flight:
            served, lam_w = littles_law_polled(records, self.in_flight)
            lines.append(f"  in flight, mean {served:.2f} requests; from the client's clock, λ·W = {lam_w:.2f} "
                         f"(Little's Law: they agree when the counts do)")
        for i, what, told in ((2, "prompt", sum(r.input_tokens for r in records)),
                              (3, "generated", sum(r.output_tokens or 0 for r in records))):
            grew = self.grew(i)
            if grew is not None:
                lines.append(f"  {what} tokens {grew:,.0f}; the clients' usage says {told:,}")
        if self.prefix_cache is not None:
            queries, hits = self.prefix_cache
            rate = f" ({100 * hits / queries:.1f} %)" if queries else ""
            lines.append(f"  prefix cache: {hits:,.0f} of {queries:,.0f} prompt tokens looked up were found "
                         f"cached{rate}")
        if self.preemptions is not None:
            lines.append(f"  preemptions: {self.preemptions:,.0f} (requests whose KV blocks were taken back, to be "
                         "prefilled again)")
        return "\n".join(lines)


async def _read(client: httpx.AsyncClient, url: str) -> dict[str, float]:
    r = await client.get(url)
    r.raise_for_status()
    return parse(r.text, WANTED)


@asynccontextmanager
async def scrape_metrics(base: str, interval: float = 0.1) -> AsyncIterator[ServerView | None]:
    """Scrape the server's /metrics every `interval` s while the `async with` block runs; yield its
    `ServerView` (filled as the run goes, and with the counters' last values at the end), or None if the
    server publishes no /metrics this module can read (the run goes on without it)."""
    if not interval > 0:
        raise ValueError(f"interval must be > 0 seconds, got {interval}.")
    url = f"{root_of(base)}/metrics"
    async with httpx.AsyncClient(timeout=10.0) as client:
        try:
            first = await _read(client, url)
        except (httpx.HTTPError, ValueError):
            first = {}
        kind = next((k for k, names in SERVERS.items() if names[0] in first), None)
        if kind is None:
            yield None
            return
        view = ServerView(kind, SERVERS[kind], first)

        async def sample() -> None:
            before = time.perf_counter()
            now = await _read(client, url)
            view.in_flight.append(((before + time.perf_counter()) / 2, now.get(running, 0.0) + now.get(waiting, 0.0)))

        running, waiting = view.names[:2]
        try:
            async with polling(interval, sample):
                yield view
        finally:
            try:
                view.after = await _read(client, url)
            except (httpx.HTTPError, ValueError):
                pass

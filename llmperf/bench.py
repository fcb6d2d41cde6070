"""A load generator for any OpenAI-compatible server: `llmperf.serve`, vLLM, SGLang, TGI, llama.cpp's.

    python -m llmperf.bench --url http://127.0.0.1:8000/v1 --rate 4 --num-requests 100

It sends streaming requests and records, for each, when it was sent, when each
chunk of text arrived, the token counts the server reports in `usage`, and any
error (`metrics.RequestRecord`); then it prints `metrics.summarize`'s table.

Two ways to load a server:

- open loop (`--rate`): requests are sent at times drawn in advance, whatever
  the server is doing. The gaps between them come from a gamma distribution with
  mean 1/rate and shape `--burstiness` (1 is a Poisson process; below 1,
  burstier), as vLLM's benchmark draws them. A slow server builds a queue, and
  the latencies show it.
- closed loop (`--concurrency`): that many clients, each sending its next
  request when its last one ends. A slow server slows the clients down, so the
  load adapts to the server and hides how long a request would have waited had
  it come on time ("coordinated omission"). Chapter 6 shows the difference.

Token timing: each streamed chunk that carries text is one arrival time. A
server that packs several tokens into one chunk gives fewer arrivals than
tokens; TPOT stays right (it divides by the token count from `usage`), but the
inter-token gaps are then gaps between chunks. Without `usage` in the stream
(a server that ignores `stream_options`), one token per chunk is assumed.

Errors (HTTP status, timeouts, dropped connections) are recorded with the
request and never stop the run.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import random
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict

import httpx

from .metrics import PERCENTILE_METHODS, RequestRecord, format_summary, summarize
from .progress import progress


def arrival_gaps(rate: float, n: int, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Seconds between n successive request sends at `rate` requests/s: gamma-distributed with mean 1/rate and
    shape `burstiness` (1: exponential gaps, a Poisson process). rate = inf sends them all at once."""
    if rate <= 0 or burstiness <= 0 or n < 0:
        raise ValueError(f"Need rate > 0, burstiness > 0 and n >= 0; got {rate}, {burstiness}, {n}.")
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    return [rng.gammavariate(burstiness, 1 / (rate * burstiness)) for _ in range(n)]


def synthetic_prompts(n: int, input_len: int, vocab: int = 32_000, seed: int = 0) -> list[list[int]]:
    """n prompts of exactly `input_len` random token ids (ids 1000..vocab-1: ordinary tokens in most
    vocabularies). Sent as token ids, they have the same length on any server whatever its tokenizer."""
    if n < 1 or input_len < 1:
        raise ValueError(f"Need n >= 1 and input_len >= 1; got {n} and {input_len}.")
    rng = random.Random(seed)
    return [[rng.randrange(1000, vocab) for _ in range(input_len)] for _ in range(n)]


async def send(client: httpx.AsyncClient, url: str, model: str, prompt, max_tokens: int, chat: bool = False,
               temperature: float = 0.0) -> RequestRecord:
    """One streaming request; its record, never an exception (errors are recorded in it)."""
    body = {"model": model, "max_tokens": max_tokens, "temperature": temperature, "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True}  # vLLM's extension, which SGLang and llama.cpp read too: every answer is max_tokens long
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    endpoint = f"{url.rstrip('/')}/{'chat/completions' if chat else 'completions'}"
    sent = time.perf_counter()
    times: list[float] = []
    usage = None
    try:
        async with client.stream("POST", endpoint, json=body) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")
                return RequestRecord(sent, error=f"HTTP {r.status_code}: {_error_message(text)}")
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if event.get("error"):
                    return RequestRecord(sent, times, error=f"stream error: {_error_message(json.dumps(event))}")
                if event.get("usage"):
                    usage = event["usage"]
                if any(_text(c, chat) for c in event.get("choices") or ()):
                    times.append(time.perf_counter())
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        return RequestRecord(sent, times, error=f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
    if usage is None:
        return RequestRecord(sent, times, input_tokens=len(prompt) if isinstance(prompt, list) else 0)
    return RequestRecord(sent, times, input_tokens=usage.get("prompt_tokens", 0),
                         output_tokens=max(usage.get("completion_tokens", 0), len(times)) if times else 0)


def _text(choice: dict, chat: bool) -> str:
    return (choice.get("delta") or {}).get("content") or "" if chat else choice.get("text") or ""


def _error_message(text: str) -> str:
    try:
        return json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return text[:200]


async def run(url: str, model: str, prompts: Sequence, max_tokens: "int | Sequence[int]", rate: float | None = None,
              concurrency: int | None = None, burstiness: float = 1.0, duration: float | None = None,
              chat: bool = False, timeout: float = 300.0, seed: int = 0, show_progress: bool = True
              ) -> list[RequestRecord]:
    """Send every prompt (or, with `duration`, as many as start within it), open loop at `rate` or closed loop
    at `concurrency`; return the records in the order the prompts were given. `max_tokens` is one number for
    every request, or one per prompt."""
    if (rate is None) == (concurrency is None):
        raise ValueError("Give either rate (open loop) or concurrency (closed loop), not both or neither.")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}.")
    lengths = [max_tokens] * len(prompts) if isinstance(max_tokens, int) else list(max_tokens)
    if len(lengths) != len(prompts):
        raise ValueError(f"Got {len(lengths)} max_tokens for {len(prompts)} prompts: give one number, or one each.")
    limits = httpx.Limits(max_connections=concurrency or 1000, max_keepalive_connections=concurrency or 100)
    records: list[RequestRecord | None] = [None] * len(prompts)
    bar = progress(range(len(prompts)), "requests") if show_progress else None
    start = time.perf_counter()

    def late() -> bool:
        return duration is not None and time.perf_counter() - start >= duration

    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0), limits=limits) as client:
        async def one(i: int) -> None:
            records[i] = await send(client, url, model, prompts[i], lengths[i], chat)
            if bar is not None:
                bar.update()

        if rate is not None:  # open loop: each request at its own time, whatever the server does
            tasks, at = [], start
            for i, gap in enumerate(arrival_gaps(rate, len(prompts), burstiness, seed)):
                at += gap
                await asyncio.sleep(max(0.0, at - time.perf_counter()))
                if late():
                    break
                tasks.append(asyncio.create_task(one(i)))
            await asyncio.gather(*tasks)
        else:  # closed loop: `concurrency` clients, each waiting for its answer before the next request
            next_i = iter(range(len(prompts)))

            async def client_loop() -> None:
                for i in next_i:
                    if late():
                        return
                    await one(i)

            await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    if bar is not None:
        bar.close()
    return [r for r in records if r is not None]


@asynccontextmanager
async def watch_in_flight(base: str, interval: float = 0.05) -> AsyncIterator[list[tuple[float, int]]]:
    """Poll `base`/health every `interval` seconds while the `async with` block runs; yield the list it fills
    with (time, requests in flight): active + waiting as `llmperf.serve` counts them (its
    /health). Each poll is timed at the midpoint of its round trip, on the clock the requests' records use.

    Serving engines publish the same count for their operators (vLLM as the Prometheus gauges
    num_requests_running and num_requests_waiting at /metrics); polling it is how the mean number in
    flight is measured without knowing anything about the requests themselves. A failed poll is skipped.
    """
    health = f"{base.rstrip('/')}/health"
    samples: list[tuple[float, int]] = []

    async def read(client: httpx.AsyncClient) -> None:
        before = time.perf_counter()
        state = (await client.get(health)).json()
        samples.append(((before + time.perf_counter()) / 2, int(state["active"]) + int(state["waiting"])))

    async def poll(client: httpx.AsyncClient) -> None:
        while True:
            before = time.perf_counter()
            try:
                await read(client)
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                pass  # a missed poll: the count is held from the one before
            await asyncio.sleep(max(0.0, interval - (time.perf_counter() - before)))

    if interval <= 0:
        raise ValueError(f"interval must be > 0 seconds, got {interval}.")
    async with httpx.AsyncClient(timeout=10.0) as client:
        try:
            await read(client)  # fail now, before the run, if there is nothing to watch
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"Cannot watch {health} ({type(e).__name__}: {e}). It must be llmperf.serve's "
                             "/health, which reports 'active' and 'waiting'.") from None
        task = asyncio.create_task(poll(client))
        try:
            yield samples
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass


def write_csv(records: Sequence[RequestRecord], path: str) -> None:
    """One row per request: send time, TTFT, E2E, TPOT (s), token counts, error."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sent", "ttft", "e2e", "tpot", "input_tokens", "output_tokens", "chunks", "error"])
        for r in records:
            t = r.times if r.ok else None
            w.writerow([r.sent, t and t.ttft, t and t.e2e, t and t.tpot, r.input_tokens,
                        t.n_tokens if t else 0, len(r.token_times), r.error or ""])


def _load_prompts(path: str) -> list:
    """One prompt per line; a JSON Lines file may give {"prompt": ...} objects instead."""
    prompts = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                prompts.append(json.loads(line)["prompt"])
            else:
                prompts.append(line)
    if not prompts:
        raise ValueError(f"{path} holds no prompts.")
    return prompts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmperf.bench", description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="the API's base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", default=None, help="model name (default: the first in /v1/models)")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", type=float, help="open loop: requests per second (inf: all at once)")
    load.add_argument("--concurrency", type=int, help="closed loop: clients sending one request at a time")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the gaps (1: Poisson)")
    p.add_argument("--num-requests", type=int, default=100)
    p.add_argument("--duration", type=float, default=None, help="stop sending after this many seconds")
    p.add_argument("--prompts-file", default=None, help="one prompt per line (or JSON Lines with 'prompt')")
    p.add_argument("--input-len", type=int, default=128, help="synthetic prompts: token ids per prompt")
    p.add_argument("--output-len", type=int, default=128, help="max_tokens of every request")
    p.add_argument("--chat", action="store_true", help="use /chat/completions (prompts as user messages)")
    p.add_argument("--percentiles", choices=list(PERCENTILE_METHODS), default="linear")
    p.add_argument("--ttft-slo", type=float, default=None, help="ms; with the others, reports goodput")
    p.add_argument("--tpot-slo", type=float, default=None, help="ms")
    p.add_argument("--e2e-slo", type=float, default=None, help="ms")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before a request counts as failed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the summary and every request to this file")
    p.add_argument("--csv", default=None, help="write one row per request to this file")
    args = p.parse_args(argv)
    if args.rate is not None and args.rate <= 0:
        p.error("--rate must be > 0 (inf sends everything at once)")
    if args.concurrency is not None and args.concurrency < 1:
        p.error("--concurrency must be at least 1")
    if args.num_requests < 1 or args.output_len < 1 or args.input_len < 1 or args.burstiness <= 0:
        p.error("need --num-requests, --output-len and --input-len >= 1 and --burstiness > 0")
    if args.chat and not args.prompts_file:
        p.error("--chat needs --prompts-file: synthetic prompts are token ids, which only /completions takes")
    try:
        prompts = _load_prompts(args.prompts_file) if args.prompts_file else None
        model = args.model or httpx.get(f"{args.url.rstrip('/')}/models", timeout=10).json()["data"][0]["id"]
    except (OSError, ValueError, KeyError, IndexError, httpx.HTTPError) as e:
        p.error(f"could not start: {e}")
    if prompts is None:
        prompts = synthetic_prompts(args.num_requests, args.input_len, seed=args.seed)
    prompts = [prompts[i % len(prompts)] for i in range(args.num_requests)]
    objectives = {k: v / 1e3 for k, v in (("ttft", args.ttft_slo), ("tpot", args.tpot_slo), ("e2e", args.e2e_slo))
                  if v is not None} or None
    records = asyncio.run(run(args.url, model, prompts, args.output_len, rate=args.rate,
                              concurrency=args.concurrency, burstiness=args.burstiness, duration=args.duration,
                              chat=args.chat, timeout=args.timeout, seed=args.seed))
    try:
        summary = summarize(records, objectives, args.percentiles)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{model} at {args.url}, " + (f"{args.rate} requests/s (open loop)" if args.rate is not None
                                        else f"concurrency {args.concurrency} (closed loop)"))
    print(format_summary(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": asdict(summary), "requests": [asdict(r) for r in records]}, f, indent=1)
    if args.csv:
        write_csv(records, args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())

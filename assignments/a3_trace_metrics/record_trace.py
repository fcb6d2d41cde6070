"""Record the request trace that assignment 3 ships (trace.json), from the course's own server.

SmolLM2-135M is served by `llmperf.serve` in this process and loaded by
`llmperf.bench`'s open-loop client, exactly as in chapter 6. Besides ordinary
requests, the trace holds the cases a metrics script must not get wrong:

- answers of one token (max_tokens=1): a TTFT and an E2E latency, but no TPOT;
- a request the server refused (HTTP 400): no tokens at all;
- a request whose client gave up mid-stream (a read timeout): some tokens
  arrived, yet the request failed and counts in no latency or throughput figure.

Times are shifted so that the first request was sent at 0 s. The file was
recorded once and is committed; rerunning this script records a new trace,
with other timings, on your machine:

    .venv/bin/python assignments/a3_trace_metrics/record_trace.py
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict
from pathlib import Path

import httpx

from llmperf import bench
from llmperf.chapters.setup import setup
from llmperf.metrics import RequestRecord
from llmperf.serve import background, create_app

HERE = Path(__file__).parent
N, RATE, PROMPT_LEN, LONG_PROMPT, SEED = 40, 1.5, 32, 1500, 7


async def record(url: str, model_name: str) -> list[dict]:
    rng = random.Random(SEED)
    lengths = [rng.choice([1, 8, 16, 24, 32, 48]) for _ in range(N)]
    prompts = bench.synthetic_prompts(N, PROMPT_LEN, vocab=49_152, seed=SEED)
    normal = asyncio.create_task(bench.run(url, model_name, prompts, lengths, rate=RATE, seed=SEED,
                                           show_progress=False))

    async def refused() -> RequestRecord:  # a client bug: max_tokens=0, which the server refuses (HTTP 400)
        await asyncio.sleep(2.0)
        async with httpx.AsyncClient(timeout=10.0) as client:
            return await bench.send(client, url, model_name, prompts[0], max_tokens=0)

    async def impatient() -> RequestRecord:  # waits at most 0.6 s for each chunk, then gives up
        await asyncio.sleep(0.5)
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=0.6)) as client:
            return await bench.send(client, url, model_name, prompts[1], max_tokens=200)

    async def long_prompt() -> RequestRecord:  # its prefill stalls every answer in flight for over 0.6 s
        await asyncio.sleep(2.5)
        long = bench.synthetic_prompts(1, LONG_PROMPT, vocab=49_152, seed=SEED + 1)[0]
        async with httpx.AsyncClient(timeout=60.0) as client:
            return await bench.send(client, url, model_name, long, max_tokens=1)

    extra = await asyncio.gather(refused(), impatient(), long_prompt())
    records = await normal
    return [asdict(r) for r in sorted([*records, *extra], key=lambda r: r.sent)]


def main() -> None:
    device, dtype, sizes, model, tokenizer = setup("cpu")
    with background(create_app(model, tokenizer, max_batch=4, capacity=LONG_PROMPT + 8)) as server:
        requests = asyncio.run(record(server.url, "smollm2-135m-instruct"))
    t0 = min(r["sent"] for r in requests)
    for r in requests:
        r["sent"] = round(r["sent"] - t0, 6)
        r["token_times"] = [round(t - t0, 6) for t in r["token_times"]]
    (HERE / "trace.json").write_text(json.dumps({
        "recorded": time.strftime("%Y-%m-%d"),
        "how": "llmperf.serve (SmolLM2-135M, float32, CPU, max_batch 4) loaded by llmperf.bench, open loop at "
               f"{RATE} requests/s; see record_trace.py",
        "requests": requests}, indent=1) + "\n")
    print(f"wrote {len(requests)} requests to {HERE / 'trace.json'}")


if __name__ == "__main__":
    main()

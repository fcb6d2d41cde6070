"""The serving stack under load: throughput against per-request latency. Printed, never asserted.

Starts `llmperf.serve` in this process (SmolLM2, on 127.0.0.1) once per batching
policy, continuous and static, and drives it with `llmperf.bench` in a closed
loop at several concurrencies: each of C clients sends its next request (a
synthetic prompt of --input-len token ids) when its last one ends. Answers
vary in length as real ones do: each request asks for a number of tokens drawn
uniformly from 1 to 2·--output-len − 1 (mean --output-len), the same draws for
both policies. That is where the policies differ: a static batch waits for its
longest answer, while continuous batching refills a finished slot at once. For each run it prints output tokens/s over the run and the median
and p99 of TTFT and TPOT. The server's maximum batch is the largest
concurrency, so at concurrency C up to C sequences decode together.

The clients run in the same process as the server and share its processor: on
a small CPU they take a little time from the engine. --url measures another
server instead (any OpenAI-compatible one; the policy is then its own).

    python benchmarks/serving.py [--concurrency 1,4,8,16] [--json serving.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys

import httpx

from llmperf.bench import run, synthetic_prompts
from llmperf.device import DTYPES, environment, pick_device
from llmperf.engine import POLICIES
from llmperf.metrics import summarize
from llmperf.serve import background, create_app


def measure(url: str, model_name: str, concurrency: int, args) -> dict:
    """One closed-loop run at `concurrency`; its summary as a table row."""
    n = max(args.min_requests, 3 * concurrency)
    prompts = synthetic_prompts(n, args.input_len, vocab=args.vocab, seed=concurrency)
    draw = random.Random(concurrency)
    lengths = [draw.randint(1, 2 * args.output_len - 1) for _ in range(n)]
    records = asyncio.run(run(url, model_name, prompts, lengths, concurrency=concurrency, show_progress=False))
    s = summarize(records)
    return {"concurrency": concurrency, "requests": s.completed, "failed": s.failed,
            "output_tokens_per_s": s.output_throughput, "ttft_p50_ms": s.ttft.median * 1e3,
            "ttft_p99_ms": s.ttft.p99 * 1e3, "tpot_p50_ms": s.tpot.median * 1e3, "tpot_p99_ms": s.tpot.p99 * 1e3,
            "per_user_tokens_per_s": 1 / s.tpot.median, "e2e_p50_ms": s.e2e.median * 1e3}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", default="1,4,8,16", help="comma-separated client counts")
    p.add_argument("--policies", default="continuous,static")
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--min-requests", type=int, default=16, help="at least this many requests per run")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--port", type=int, default=0, help="0: any free port")
    p.add_argument("--url", default=None, help="measure this server instead of starting one")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    try:
        levels = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        p.error(f"--concurrency must be comma-separated integers, got {args.concurrency!r}")
    policies = [x.strip() for x in args.policies.split(",")]
    if min(levels) < 1 or args.input_len < 1 or args.output_len < 2 or args.min_requests < 1:
        p.error("need concurrencies >= 1, --input-len >= 1, --output-len >= 2 and --min-requests >= 1")
    if any(x not in POLICIES for x in policies):
        p.error(f"--policies must name continuous and/or static, got {args.policies!r}")

    rows = []
    if args.url:
        try:
            name = httpx.get(f"{args.url.rstrip('/')}/models", timeout=10).json()["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as e:
            p.error(f"could not reach {args.url}: {e}")
        args.vocab = 32_000
        env = {"server": args.url}
        rows += [{"policy": "(server's own)", **measure(args.url, name, c, args)} for c in levels]
    else:
        from llmperf.weights import load_smollm2

        device = pick_device(args.device)
        model, tokenizer = load_smollm2(device, DTYPES[args.dtype])
        args.vocab = tokenizer.vocab_size
        env = environment(device, DTYPES[args.dtype])
        print(env)
        for policy in policies:
            app = create_app(model, tokenizer, max_batch=max(levels), capacity=1024, policy=policy)
            with background(app, port=args.port) as server:
                for c in levels:
                    rows.append({"policy": policy, **measure(server.url, "smollm2-135m-instruct", c, args)})
                    print(f"{policy} at concurrency {c}: done", flush=True)

    print(f"\nclosed loop, {args.input_len}-token prompts, 1 to {2 * args.output_len - 1} new tokens each")
    print(f"{'policy':<15} {'clients':>7} {'tokens/s':>9} {'per user':>9} {'TTFT p50':>9} {'p99':>8} "
          f"{'TPOT p50':>9} {'p99':>8} {'E2E p50':>8}  (ms)")
    for r in rows:
        print(f"{r['policy']:<15} {r['concurrency']:>7} {r['output_tokens_per_s']:>9.1f} "
              f"{r['per_user_tokens_per_s']:>9.1f} {r['ttft_p50_ms']:>9.0f} {r['ttft_p99_ms']:>8.0f} "
              f"{r['tpot_p50_ms']:>9.1f} {r['tpot_p99_ms']:>8.1f} {r['e2e_p50_ms']:>8.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": rows}, f, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

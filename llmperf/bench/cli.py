"""`python -m llmperf.bench`: load a server from the command line and print what its clients saw."""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict

from ..metrics import PERCENTILE_METHODS, RequestRecord, format_summary, percentile, summarize
from .client import api_base, discover_model
from .load import achieved_rate, run, synthetic_prompts


def write_csv(records: Sequence[RequestRecord], path: str) -> None:
    """One row per request: send time, TTFT, E2E, TPOT (s), token counts, error."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sent", "ttft", "e2e", "tpot", "input_tokens", "output_tokens", "chunks", "error"])
        for r in records:
            t = r.times if r.ok else None
            w.writerow([r.sent, t and t.ttft, t and t.e2e, t and t.tpot, r.input_tokens,
                        t.n_tokens if t else 0, len(r.token_times), r.error or ""])


def load_prompts(path: str) -> list:
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


def describe_load(records: Sequence[RequestRecord], rate: float | None, concurrency: int | None,
                  method: str = "linear") -> str:
    """How the load was offered: the loop, the rate asked for against the rate the requests arrived at, and
    under a cap, how long requests waited in the client for a free slot."""
    if rate is None:
        return f"closed loop, concurrency {concurrency}"
    achieved = achieved_rate(records)
    line = f"open loop at {rate:g} requests/s" + (f", at most {concurrency} in flight" if concurrency else "")
    line += f"; requests arrived at {achieved:.3g}/s" if achieved is not None else ""
    waits = [r.queued for r in records]
    if concurrency and waits:
        mean_ms, p99_ms = 1e3 * sum(waits) / len(waits), 1e3 * percentile(waits, 99, method)
        line += (f"\nwaited for a slot in the client (left out of TTFT and E2E): mean {mean_ms:.1f} ms, "
                 f"p99 {p99_ms:.1f} ms")
    return line


def main(argv=None) -> int:
    from . import __doc__ as doc

    p = argparse.ArgumentParser(prog="python -m llmperf.bench", description=doc.splitlines()[0])
    p.add_argument("--url", required=True, help="the server's root (http://127.0.0.1:8000) or its API base (.../v1)")
    p.add_argument("--model", default=None, help="model name (default: the first in /v1/models)")
    p.add_argument("--rate", type=float, help="open loop: requests per second (inf: all at once)")
    p.add_argument("--concurrency", type=int, help="closed loop: clients sending one request at a time; with "
                   "--rate, the most requests in flight")
    p.add_argument("--warmups", type=int, default=0, help="requests sent first and not measured")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the gaps (1: Poisson)")
    p.add_argument("--num-requests", type=int, default=100)
    p.add_argument("--duration", type=float, default=None, help="stop sending after this many seconds")
    p.add_argument("--prompts-file", default=None, help="one prompt per line (or JSON Lines with 'prompt')")
    p.add_argument("--input-len", type=int, default=128, help="synthetic prompts: token ids per prompt")
    p.add_argument("--output-len", type=int, default=128, help="max_tokens of every request")
    p.add_argument("--chat", action="store_true", help="use /chat/completions (prompts as user messages)")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false", help="let the server stop at the "
                   "model's end-of-sequence token (answers may be shorter than --output-len)")
    p.add_argument("--percentiles", choices=list(PERCENTILE_METHODS), default="linear")
    p.add_argument("--ttft-slo", type=float, default=None, help="ms; with the others, reports goodput")
    p.add_argument("--tpot-slo", type=float, default=None, help="ms")
    p.add_argument("--e2e-slo", type=float, default=None, help="ms")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before a request counts as failed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the command, the summary and every request to this file")
    p.add_argument("--csv", default=None, help="write one row per request to this file")
    args = p.parse_args(argv)
    if args.rate is None and args.concurrency is None:
        p.error("give --rate (open loop), --concurrency (closed loop), or both (a rate with a cap)")
    if args.rate is not None and not args.rate > 0:
        p.error("--rate must be > 0 (inf sends everything at once)")
    if args.concurrency is not None and args.concurrency < 1:
        p.error("--concurrency must be at least 1")
    if args.warmups < 0:
        p.error("--warmups must be 0 or more")
    if args.num_requests < 1 or args.output_len < 1 or args.input_len < 1 or args.burstiness <= 0:
        p.error("need --num-requests, --output-len and --input-len >= 1 and --burstiness > 0")
    if args.chat and not args.prompts_file:
        p.error("--chat needs --prompts-file: synthetic prompts are token ids, which only /completions takes")
    try:
        base = api_base(args.url)
        prompts = load_prompts(args.prompts_file) if args.prompts_file else None
        model = args.model or discover_model(base)
    except (OSError, ValueError) as e:
        p.error(f"could not start: {e}")
    if prompts is None:
        prompts = synthetic_prompts(args.num_requests, args.input_len, seed=args.seed)
    prompts = [prompts[i % len(prompts)] for i in range(args.num_requests)]
    objectives = {k: v / 1e3 for k, v in (("ttft", args.ttft_slo), ("tpot", args.tpot_slo), ("e2e", args.e2e_slo))
                  if v is not None} or None
    records = asyncio.run(run(base, model, prompts, args.output_len, rate=args.rate, concurrency=args.concurrency,
                              burstiness=args.burstiness, duration=args.duration, chat=args.chat,
                              timeout=args.timeout, seed=args.seed, warmups=args.warmups,
                              ignore_eos=args.ignore_eos))
    try:
        summary = summarize(records, objectives, args.percentiles)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    load = describe_load(records, args.rate, args.concurrency, args.percentiles)
    print(f"{model} at {base}, {load}" + (f" ({args.warmups} warm-up requests not counted)" if args.warmups else ""))
    print(format_summary(summary))
    if args.json:
        command = "python -m llmperf.bench " + shlex.join(sys.argv[1:] if argv is None else argv)
        with open(args.json, "w") as f:
            json.dump({"command": command, "url": base, "model": model, "achieved_rate": achieved_rate(records),
                       "summary": asdict(summary), "requests": [asdict(r) for r in records]}, f, indent=1)
    if args.csv:
        write_csv(records, args.csv)
    return 0

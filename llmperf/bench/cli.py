"""`python -m llmperf.bench`: load a server from the command line and print what its clients saw.

A load generator for any OpenAI-compatible server: `llmperf.serve`, vLLM, SGLang, TGI, llama.cpp's.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

from ..metrics import PERCENTILE_METHODS, RequestRecord, failures, percentile, summarize
from .client import api_base, discover_model
from . import conversations, inputs, names, scale, workloads
from .files import load_prompts, write_csv, write_json
from .load import achieved_rate, arrival_gaps, run, warm_up
from .report import format_summary
from .scrape import SERVERS, scrape_metrics
from .sweep import KINDS, sweep


def describe_load(records: Sequence[RequestRecord], rate: float | None, concurrency: int | None,
                  method: str = "linear", drawn: float | None = None, warmups: int = 0) -> str:
    """How the load was offered: the loop; at a rate, the rate the requests arrived at against the rate asked
    for and the rate of the gaps drawn for them (`drawn`: a sender that fell behind arrives below it); under a
    cap, how long requests waited in the client for a free slot; the warm-up requests left out."""
    head = (f"closed loop, concurrency {concurrency}" if rate is None else f"open loop at {rate:g} requests/s"
            + (f", at most {concurrency} in flight" if concurrency else ""))
    head += f" ({warmups} warm-up requests first, not counted)" if warmups else ""
    lines = [head]
    achieved = achieved_rate(records)
    if rate is not None and achieved is not None:
        lines.append(f"requests arrived at {achieved:.3g}/s" + (
            f"; the gaps drawn for them average {drawn:.3g}/s" if drawn is not None else ""))
    waits = [r.queued for r in records]
    if rate is not None and concurrency and waits:
        mean_ms, p99_ms = 1e3 * sum(waits) / len(waits), 1e3 * percentile(waits, 99, method)
        lines.append(f"waited for a slot in the client (left out of TTFT and E2E): mean {mean_ms:.1f} ms, "
                     f"p99 {p99_ms:.1f} ms")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmperf.bench", description=__doc__.split("\n\n")[1].strip())
    p.add_argument("--url", required=True, help="the server's root (http://127.0.0.1:8000) or its API base (.../v1)")
    p.add_argument("--model", default=None, help="model name (default: the first in /v1/models)")
    p.add_argument("--rate", type=float, help="open loop: requests per second (inf: all at once)")
    p.add_argument("--concurrency", type=int, help="closed loop: clients sending one request at a time; with "
                   "--rate, the most requests in flight")
    p.add_argument("--warmups", type=int, default=0, help="requests sent first and not measured")
    p.add_argument("--sweep", choices=KINDS, default=None, help="run a series of loads (llmperf.bench.sweep): by "
                   "rate, one request at a time, all at once, then --sweep-steps rates between (--concurrency caps "
                   "each); by concurrency, a closed loop at each of --sweep-values")
    p.add_argument("--sweep-steps", type=int, default=4, help="rates between one at a time and all at once")
    p.add_argument("--sweep-values", default=None, help="comma-separated rates (requests/s) or client counts to "
                   "run instead (a concurrency sweep's default: 1,2,4,8,16)")
    p.add_argument("--attainment", type=float, default=90.0, help="%% of a sweep point's requests that must meet "
                   "every objective for the point to meet them (DistServe's goodput; default 90)")
    p.add_argument("--no-metrics", dest="metrics", action="store_false", help="do not scrape the server's "
                   "/metrics during the run (by default its own counts are reported beside the client's)")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the gaps (1: Poisson)")
    p.add_argument("--num-requests", type=int, default=None, help="requests to send (default 100; a --trace's: "
                   "all of its)")
    p.add_argument("--duration", type=float, default=None, help="stop sending after this many seconds")
    p.add_argument("--prompts-file", default=None, help="one prompt per line (or JSON Lines with 'prompt')")
    p.add_argument("--input-len", type=int, default=128, help="synthetic prompts: tokens per prompt (the mean)")
    p.add_argument("--output-len", type=int, default=128, help="max_tokens of each request (the mean)")
    p.add_argument("--length-dist", choices=workloads.DISTRIBUTIONS, default="fixed",
                   help="how prompt and output lengths vary about their means (llmperf.bench.workloads)")
    p.add_argument("--input-spread", type=float, default=0.0, help="uniform: ± this fraction; normal: the "
                   "standard deviation as a fraction of the mean")
    p.add_argument("--output-spread", type=float, default=0.0, help="as --input-spread, for output lengths")
    p.add_argument("--shared-prefix", type=int, default=0, help="synthetic prompts: ids every prompt of a group "
                   "starts with (a system prompt), before its own --input-len")
    p.add_argument("--prefix-groups", type=int, default=1, help="groups sharing a prefix, taken in turn")
    p.add_argument("--turns", type=int, default=1, help="multi-turn: each of --num-requests is a conversation of "
                   "this many requests, each carrying the whole history (llmperf.bench.conversations)")
    p.add_argument("--chat", action="store_true", help="use /chat/completions (prompts as user messages)")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false", help="let the server stop at the "
                   "model's end-of-sequence token (answers may be shorter than --output-len)")
    p.add_argument("--percentiles", choices=list(PERCENTILE_METHODS), default="linear")
    p.add_argument("--ttft-slo", type=float, default=None, help="ms; with the others, reports goodput")
    p.add_argument("--tpot-slo", type=float, default=None, help="ms")
    p.add_argument("--e2e-slo", type=float, default=None, help="ms")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a whole request may take before it counts "
                   "as failed (a deadline on the whole answer, not only on each read)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the command, the summary and every request to this file")
    p.add_argument("--csv", default=None, help="write one row per request to this file")
    p.add_argument("--plot", default=None, help="draw the run's TTFT, TPOT and ITL distributions to this file "
                   "(.png, .svg or .pdf)")
    inputs.add_arguments(p)
    scale.add_arguments(p)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["merge"]:
        from .merge import main as merge

        return merge(argv[1:])
    args = p.parse_args(argv)
    inputs.check(p, args)
    scale.check(p, args)
    values = None
    if args.sweep:
        if args.rate is not None:
            p.error("--sweep chooses its own rates: leave out --rate (give --sweep-values to choose them)")
        if args.sweep == "concurrency" and args.concurrency is not None:
            p.error("--sweep concurrency sets the clients itself: give them as --sweep-values, not --concurrency")
        try:
            values = [float(v) for v in args.sweep_values.split(",")] if args.sweep_values else None
        except ValueError:
            p.error(f"--sweep-values takes comma-separated numbers, got {args.sweep_values!r}")
        if values is not None and (any(not v > 0 for v in values) or (
                args.sweep == "concurrency" and any(v != int(v) for v in values))):
            p.error(f"--sweep-values must be rates > 0, or whole numbers of clients >= 1; got {args.sweep_values!r}")
        if args.sweep_steps < 0 or not 0 < args.attainment <= 100:
            p.error("need --sweep-steps >= 0 and 0 < --attainment <= 100")
    elif args.sweep_values or args.sweep_steps != 4:
        p.error("--sweep-values and --sweep-steps are for a sweep: give --sweep rate or --sweep concurrency")
    elif args.rate is None and args.concurrency is None and not args.trace:
        p.error("give --rate (open loop), --concurrency (closed loop), or both (a rate with a cap), or --sweep")
    if args.rate is not None and not args.rate > 0:
        p.error("--rate must be > 0 (inf sends everything at once)")
    if args.concurrency is not None and args.concurrency < 1:
        p.error("--concurrency must be at least 1")
    if args.warmups < 0:
        p.error("--warmups must be 0 or more")
    if not args.timeout > 0:
        p.error(f"--timeout is the seconds each request may take, > 0; got {args.timeout:g}")
    if (args.num_requests is not None and args.num_requests < 1) or args.output_len < 1 or args.input_len < 1 \
            or args.burstiness <= 0:  # (a trace's --num-requests, if not given, is its length)
        p.error("need --num-requests, --output-len and --input-len >= 1 and --burstiness > 0")
    if args.plot and (Path(args.plot).suffix.lower() not in (".png", ".svg", ".pdf")
                      or not Path(args.plot).resolve().parent.is_dir()):
        p.error(f"--plot needs a .png, .svg or .pdf file in a folder that exists, got {args.plot!r}")
    if args.shared_prefix < 0 or args.prefix_groups < 1:
        p.error("need --shared-prefix >= 0 and --prefix-groups >= 1")
    if args.turns < 1:
        p.error("--turns must be at least 1 (1: single requests)")
    try:
        workload = inputs.prompts_from(args)  # read and built whole before anything is sent
        base = api_base(args.url)
        prompts = load_prompts(args.prompts_file) if args.prompts_file else None
        model = args.model or discover_model(base)
    except (OSError, ValueError) as e:
        p.error(f"could not start: {e}")
    try:
        outputs = workloads.lengths(args.num_requests, args.output_len, args.output_spread, args.length_dist,
                                    seed=args.seed + 1)
        if workload is not None:
            prompts, outputs = workload.prompts, workload.outputs
        elif prompts is None:
            sizes = workloads.lengths(args.num_requests, args.input_len, args.input_spread, args.length_dist,
                                      seed=args.seed)
            prompts = workloads.prompts(sizes, prefix=args.shared_prefix, groups=args.prefix_groups,
                                        seed=args.seed)
        if args.turns > 1 and args.prompts_file:
            prompts = conversations.from_lines(prompts, args.num_requests, args.turns)
        elif args.turns > 1 and workload is None:
            prompts = conversations.from_ids(prompts, args.turns, sizes, seed=args.seed + 2)
    except ValueError as e:
        p.error(str(e))
    prompts = [prompts[i % len(prompts)] for i in range(args.num_requests)]
    objectives = {k: v / 1e3 for k, v in (("ttft", args.ttft_slo), ("tpot", args.tpot_slo), ("e2e", args.e2e_slo))
                  if v is not None} or None
    async def measured():
        if args.warmups:  # before the server's counters are first read
            await warm_up(base, model, prompts, outputs, args.warmups,
                          args.concurrency or 1, args.chat, args.timeout, args.ignore_eos)
        job = scale.split(args, run)  # `run` as this command's share of the schedule, on its workers
        async with scrape_metrics(base) if args.metrics else nullcontext() as view:
            records = await job(base, model, prompts, outputs, rate=args.rate, concurrency=args.concurrency,
                                burstiness=args.burstiness, duration=args.duration, chat=args.chat,
                                timeout=args.timeout, seed=args.seed, ignore_eos=args.ignore_eos,
                                schedule=workload and workload.schedule)
        return records, view

    if args.sweep:
        return _sweep(args, base, model, prompts, outputs, objectives, values, argv, workload)
    try:
        records, view = asyncio.run(measured())
    except ValueError as e:  # a start that passed, a worker that failed
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        summary = summarize(records, objectives, args.percentiles)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        if args.json:  # what failed, and how, is the record of such a run
            errors, examples = failures(records)
            write_json(args.json, argv, base, model, summary=None, errors=errors, error_examples=examples,
                       requests=[asdict(r) for r in records])
        return 1
    drawn = None
    arrived = sum(r.turn <= 1 for r in records)  # requests, or conversations
    if args.rate is not None and math.isfinite(args.rate):  # a shard's own share of the schedule's gaps
        drawn = scale.drawn_rate(args, arrived, lambda n: arrival_gaps(args.rate, n, args.burstiness, args.seed))
    load = describe_load(records, args.rate, args.concurrency, args.percentiles, drawn, args.warmups)
    if workload is not None and workload.schedule is not None:
        load = inputs.replayed(workload, records, args.concurrency, args.warmups)
    head = load.splitlines()[0]
    print(f"{model} at {base}, {load}")
    if split := scale.describe(args):
        print(split)
    print(format_summary(summary))
    ours = workload and inputs.share(workload, *args.shard)  # a shard's own prompts
    if workload is not None:
        print(inputs.counts(ours, records))
    if args.turns > 1:
        print(conversations.by_turn(records, args.percentiles))
    print(names.legend())
    if args.metrics:
        print(view.report(records) if view else "the server's own count: none (its /metrics, if any, has none of "
              f"the names llmperf.bench reads: {', '.join(SERVERS)})")
    if args.json:
        server = view and {"server": view.server, "in_flight": view.in_flight, "before": view.before,
                           "after": view.after, "prefix_cache": view.prefix_cache, "preemptions": view.preemptions}
        write_json(args.json, argv, base, model, achieved_rate=achieved_rate(records), server_metrics=server,
                   scale=scale.record(args), summary=asdict(summary), requests=[asdict(r) for r in records],
                   **({"inputs": inputs.record(ours, records)} if workload else {}))
    if args.csv:
        write_csv(records, args.csv)
    if args.plot:
        from .report import save

        save(records, args.plot, f"{model}, {head}", objectives, args.percentiles)
        print(f"figure: {args.plot}")
    return 0


def _sweep(args, base: str, model: str, prompts, outputs, objectives, values, argv, workload=None) -> int:
    """`main` for --sweep: run it, print its points as they end and then its readings; write what was asked."""
    def said(point) -> None:
        s = point.summary
        print(f"  {point.load}: {s.request_throughput:.3g} requests/s, {s.output_throughput:.4g} tokens/s, "
              f"median TTFT {s.ttft.median * 1e3:.0f} ms, median E2E {s.e2e.median * 1e3:.0f} ms", flush=True)

    print(f"{model} at {base}, a sweep by {args.sweep}" + (f" ({args.warmups} warm-up requests first, not counted)"
                                                            if args.warmups else ""))
    try:
        result = asyncio.run(sweep(
            base, model, prompts, outputs, args.sweep, values, args.sweep_steps, args.concurrency, objectives,
            args.attainment / 100, args.percentiles, on_point=said, burstiness=args.burstiness,
            duration=args.duration, chat=args.chat, timeout=args.timeout, seed=args.seed, warmups=args.warmups,
            ignore_eos=args.ignore_eos))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(result.report())
    print(names.legend())
    if args.json:
        found = {"capacity": result.capacity.load, "knee": result.knee and result.knee.load,
                 "best": result.best and result.best.load, "target": result.target}
        write_json(args.json, argv, base, model, sweep={"kind": result.kind, **found, "points": [
            {"label": pt.label, "rate": "inf" if pt.rate == math.inf else pt.rate,  # JSON has no inf
             "concurrency": pt.concurrency, "row": pt.row(),
             "summary": asdict(pt.summary), "requests": [asdict(r) for r in pt.records]} for pt in result.points]},
                   **({"inputs": inputs.record(workload, [])} if workload else {}))  # its source and tokenizer
    if args.csv:
        write_csv(result, args.csv)
    if args.plot:
        from .report import save

        save(result, args.plot, f"{model}: a sweep by {args.sweep}")
        print(f"figure: {args.plot}")
    return 0

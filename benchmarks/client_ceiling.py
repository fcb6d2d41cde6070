"""The load generator's own ceiling: the highest request rate, and streamed chunks per second, at which
`llmperf.bench`'s TTFT stays within 5 ms of the truth on the mean, by number of worker processes (`--workers`).

    .venv/bin/python benchmarks/client_ceiling.py --json benchmarks/results/client_ceiling-MY-MACHINE.json

Against the stub server of tests/stub_server.py, in a process of its own: it sends a request's first chunk
`--stub-ttft` after the request's bytes arrive and then one every `--stub-gap`, and keeps when it did so on the
machine's monotonic clock, which the client shares; so each request's TTFT error is the client's TTFT minus
the stub's. At each worker count the rate climbs by `--step` from `--from` (each load `--seconds` long, its
arrivals at exactly the rate asked, fresh prompts) until a load fails: a mean TTFT error above `--error-ms`, a
failed request, or requests arriving below 90 % of the rate asked (the sender fell behind), and again in each
of `--retries` reruns (a hiccup of the host fails one run, not the rate). `--refine` loads then narrow the gap
between the last rate that passed and the first that failed; the ceiling is the highest that passed. The climb
is repeated `--repeats` times, taking turns between worker counts, and the table gives the median ceiling with
its range. The host's load average, before and after, is kept with the result.

What is measured is this client against this stub on this host: the stub's own event loop shares the cores,
and a late stub stamps a request's arrival late, which counts as client error here too. Workers beyond the
cores share them; on 2 cores the stub takes part of one. A chunk is one token here (`--tokens` per request), so
chunks/s is the rate times `--tokens`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import re
import statistics
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmperf import benchresults  # noqa: E402
from llmperf.bench import run  # noqa: E402
from llmperf.bench.load import achieved_rate  # noqa: E402
from llmperf.bench.scale import split  # noqa: E402
from llmperf.host import cpu_name  # noqa: E402
from llmperf.progress import progress  # noqa: E402
from tests.stub_server import started  # noqa: E402


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processor() -> str:
    """The processor's name without trademarks or filler: "Intel Xeon", "AMD EPYC"."""
    name = re.sub(r"\((R|TM|tm)\)|\b(Processor|CPU)\b|@.*$", "", cpu_name())
    return " ".join(name.split()) or platform.machine()


def load(url: str, rate: float, seconds: float, workers: int, tokens: int, first: int) -> dict:
    """One load at `rate` for `seconds` on `workers` processes, prompts numbered from `first`: its TTFT errors
    against the stub's truth (ms), failures, arrival rate and chunks/s."""
    n = max(int(rate * seconds), 2)
    prompts = [[first + i] for i in range(n)]
    scaled = argparse.Namespace(workers=workers, shard=(0, 1), start_at=None)
    records = asyncio.run(split(scaled, run)(f"{url}/v1", "stub", prompts, tokens, rate=rate, show_progress=False,
                              exact_rate=True))
    truth = httpx.get(f"{url}/truth", timeout=30).json()
    errors = []
    for prompt, r in zip(prompts, records):
        t = truth.get(json.dumps(prompt))
        if r.ok and t and t["tokens"]:
            errors.append(1e3 * ((r.token_times[0] - r.sent) - (t["tokens"][0] - t["arrived"])))
    ok = [r for r in records if r.ok]
    span = max(r.token_times[-1] for r in ok) - min(r.sent for r in ok) if ok else 0
    return {"rate": rate, "requests": n, "failed": n - len(ok), "arrived_rate": achieved_rate(records),
            "chunks_per_s": sum(len(r.token_times) for r in ok) / span if span else 0.0,
            "ttft_error_mean_ms": statistics.fmean(errors) if errors else None,
            "ttft_error_p99_ms": sorted(errors)[int(0.99 * (len(errors) - 1))] if errors else None}


def passed(point: dict, limit_ms: float) -> bool:
    return (point["failed"] == 0 and point["ttft_error_mean_ms"] is not None
            and point["ttft_error_mean_ms"] <= limit_ms and (point["arrived_rate"] or 0) >= 0.9 * point["rate"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    p.add_argument("--from", dest="start", type=float, default=20.0, help="first rate, requests/s")
    p.add_argument("--step", type=float, default=1.4, help="each rate is the last times this")
    p.add_argument("--refine", type=int, default=2, help="loads between the last rate passed and the first "
                   "failed, each halving the gap between them (geometrically)")
    p.add_argument("--retries", type=int, default=1, help="times a failed load is run again before it counts")
    p.add_argument("--seconds", type=float, default=2.0, help="length of each load")
    p.add_argument("--repeats", type=int, default=3, help="climbs at each worker count, taken in turns")
    p.add_argument("--tokens", type=int, default=16, help="chunks per request (one token each)")
    p.add_argument("--error-ms", type=float, default=5.0, help="the mean TTFT error a load may have")
    p.add_argument("--stub-ttft", type=float, default=0.02, help="the stub's TTFT, s")
    p.add_argument("--stub-gap", type=float, default=0.01, help="the stub's gap between chunks, s")
    p.add_argument("--json", default=None, help="write the result file here")
    args = p.parse_args()
    try:
        counts = [int(w) for w in args.workers.split(",")]
    except ValueError:
        p.error(f"--workers takes comma-separated whole numbers, got {args.workers!r}")
    if min(counts) < 1 or args.step <= 1 or args.start <= 0 or args.seconds <= 0 or args.repeats < 1:
        p.error("need workers >= 1, --step > 1, --from > 0, --seconds > 0 and --repeats >= 1")
    climbs: dict[int, list[dict]] = {w: [] for w in counts}
    busy = os.getloadavg()[0]  # the host's load before: other work shares the cores
    first = 1_000_000
    with started(free_port(), args.stub_ttft, args.stub_gap) as url:
        asyncio.run(run(f"{url}/v1", "stub", [[i] for i in range(8)], args.tokens, concurrency=4,
                        show_progress=False))  # the stub's first-use costs, before any load counts
        for _, workers in progress([(k, w) for k in range(args.repeats) for w in counts], "climbs"):
            rate, points = args.start, []

            def measure(rate: float) -> dict:
                nonlocal first
                point = load(url, rate, args.seconds, workers, args.tokens, first)
                first += point["requests"]
                points.append(point)
                print(f"  {workers} worker(s), {rate:7.1f} req/s: arrived {point['arrived_rate'] or 0:7.1f}/s, "
                      f"{point['chunks_per_s']:7.0f} chunks/s, TTFT error {point['ttft_error_mean_ms'] or 0:6.2f} ms "
                      f"mean, {point['failed']} failed", flush=True)
                return point

            def judge(rate: float) -> dict:
                point = measure(rate)
                for _ in range(args.retries if not passed(point, args.error_ms) else 0):
                    point = measure(rate)  # a failure counts when it repeats: one hiccup of the host is not one
                    if passed(point, args.error_ms):
                        break
                return point

            while True:
                point = judge(rate)
                if not passed(point, args.error_ms):
                    break
                rate *= args.step
            low, high = rate / args.step, rate
            for _ in range(args.refine if len(points) > 1 else 0):  # between the last pass and the first failure
                point = judge(math.sqrt(low * high))
                low, high = (point["rate"], high) if passed(point, args.error_ms) else (low, point["rate"])
            good = [pt for pt in points if passed(pt, args.error_ms)]
            climbs[workers].append({"ceiling": max(good, key=lambda pt: pt["rate"]) if good else None,
                                    "points": points})
    rows = []
    for workers, found in climbs.items():
        tops = [c["ceiling"] for c in found if c["ceiling"]]
        rates = [t["rate"] for t in tops]
        rows.append({"workers": workers, "ceiling_rate": statistics.median(rates) if rates else None,
                     "ceiling_rate_min": min(rates, default=None), "ceiling_rate_max": max(rates, default=None),
                     "chunks_per_s": statistics.median(t["chunks_per_s"] for t in tops) if tops else None,
                     "ttft_error_mean_ms": statistics.median(t["ttft_error_mean_ms"] for t in tops) if tops else None,
                     "climbs": len(found)})
    for r in rows:
        print(f"{r['workers']} worker(s): ceiling {r['ceiling_rate'] or 0:.1f} req/s (climbs' range "
              f"{r['ceiling_rate_min'] or 0:.1f} to {r['ceiling_rate_max'] or 0:.1f}), {r['chunks_per_s'] or 0:.0f} "
              f"chunks/s, mean TTFT error {r['ttft_error_mean_ms'] or 0:.2f} ms")
    if args.json:
        environment = {"device": "cpu", "device_name": processor(), "cpu_count": os.cpu_count(),
                       "python": platform.python_version(), "httpx": httpx.__version__}
        results = {"rows": rows, "error_limit_ms": args.error_ms, "tokens_per_request": args.tokens,
                   "stub": {"ttft_s": args.stub_ttft, "gap_s": args.stub_gap}, "seconds_per_load": args.seconds,
                   "climbs": {str(w): c for w, c in climbs.items()},
                   "load_average_before": busy, "load_average_after": os.getloadavg()[0]}
        data = benchresults.result("client_ceiling", environment, results)
        data["machine"]["cpu_name"] = processor()
        print(f"wrote {benchresults.save(data, args.json)}")


if __name__ == "__main__":
    main()

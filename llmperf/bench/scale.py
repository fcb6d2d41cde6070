"""One schedule of requests sent by several processes (`--workers N`) or several machines (`--shard I/N`).

A client's own event loop has a ceiling: past some rate of requests, or of streamed chunks, it reads each chunk
late and its TTFT says more about the client than the server (benchmarks/client_ceiling.py measures where, on
the host it runs on). Two ways past it, which combine:

- `--workers N`: the run's schedule is sent by N processes, each with its own event loop; worker w sends
  requests w, w + N, w + 2N, … at their own times in the one schedule, all starting at one wall-clock moment
  chosen once every worker is ready. Their records are put on the parent's clock and merged in the schedule's
  order. More workers than cores share the cores again: allowed, with a warning.
- `--shard I/N --start-at T`: on each of N machines the same command (same seed, so the same schedule) sends
  its I-th interleaved part, requests I, I + N, I + 2N, … (I counts from 0), from the wall-clock time T (Unix
  seconds, or ISO 8601, UTC where it names no zone). Each writes its JSON; `python -m llmperf.bench merge`
  (`merge`) puts the records on one clock and recomputes every statistic. The machines' wall clocks must
  agree (NTP keeps them within a millisecond or so); a skew shifts their arrivals, not a request's own TTFT.

A concurrency (`--concurrency`, a closed loop's clients or an open loop's cap) is the total over every part:
each of the parts gets its share, so each part needs at least one. Warm-up requests are sent once, by the
parent, before the workers start. A sweep runs its loads one after another in one process and takes neither.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timezone

from ..metrics import RequestRecord

READY_MARGIN = 0.5  # s from the moment every worker is ready to the schedule's start: time to open connections
NOT_THE_SCHEDULE = ("url", "shard", "start_at", "workers", "json", "csv", "plot", "metrics")  # args a shard may vary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of this module, on `python -m llmperf.bench`'s parser (and, in its help, the merge)."""
    parser.epilog = ("Shards' JSON files, each from --shard I/N --start-at T --json FILE, make one run with: "
                     "python -m llmperf.bench merge A.json B.json ... [--json OUT.json]")
    parser.add_argument("--workers", type=int, default=1, help="processes sending the schedule, each its "
                        "interleaved share with its own event loop (default 1; up to the cores)")
    parser.add_argument("--shard", default=None, help="I/N: send only requests I, I+N, I+2N, ... of the schedule "
                        "(I from 0), as one of N machines; merge their JSON with `python -m llmperf.bench merge`")
    parser.add_argument("--start-at", default=None, help="when the schedule starts: Unix seconds or ISO 8601 "
                        "(UTC unless it names a zone); needed with --shard, so that every shard starts together")


def parse_shard(text: str) -> tuple[int, int]:
    """(I, N) from "I/N", with 0 <= I < N; ValueError saying what a shard is otherwise."""
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes I/N, e.g. 0/2 and 1/2 on two machines; got {text!r}.") from None
    if not 0 <= index < count:
        raise ValueError(f"--shard I/N needs N >= 1 and 0 <= I < N (shards count from 0: 0/{max(count, 2)} to "
                         f"{max(count, 2) - 1}/{max(count, 2)}); got {text!r}.")
    return index, count


def parse_time(text: str, now: float | None = None) -> float:
    """Unix seconds from `text`, a Unix time in seconds or an ISO 8601 time (UTC if it names no zone); ValueError
    if it is neither, or if it has passed (`now`: the time to compare with, by default the wall clock's)."""
    try:
        when = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(f"--start-at takes Unix seconds (e.g. {time.time() + 60:.0f}) or an ISO 8601 time "
                             f"(e.g. 2026-12-06T18:00:00Z); got {text!r}.") from None
        when = (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()
    now = time.time() if now is None else now
    if when <= now:
        raise ValueError(f"--start-at {text} is {now - when:.1f} s in the past: give a time far enough ahead for "
                         "every machine to start its command and warm up.")
    return when


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, through `parser`, what cannot run; turn --shard and --start-at into numbers in `args`."""
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    try:
        args.shard = parse_shard(args.shard) if args.shard is not None else (0, 1)
        args.start_at = parse_time(args.start_at) if args.start_at is not None else None
    except ValueError as e:
        parser.error(str(e))
    if args.shard[1] > 1 and args.start_at is None:
        parser.error("--shard needs --start-at: every machine's part must start at one moment for the parts to "
                     "make one schedule")
    if args.sweep and (args.workers > 1 or args.shard[1] > 1 or args.start_at is not None):
        parser.error("a sweep runs its loads one after another in one process: --workers, --shard and "
                     "--start-at are for one load (--rate, --concurrency)")
    parts = args.workers * args.shard[1]
    if parts > 1 and args.concurrency is not None and args.concurrency < parts:
        parser.error(f"--concurrency {args.concurrency} is the total over {parts} parts (workers × shards): give "
                     "at least one each")
    if args.workers > (os.cpu_count() or 1):
        print(f"warning: {args.workers} workers on {os.cpu_count()} cores share them: past the cores, more "
              "workers do not raise the client's ceiling", file=sys.stderr)


def describe(args: argparse.Namespace) -> str | None:
    """How the schedule was split, as a line for the run's report; None for one process sending all of it."""
    said = []
    if args.shard[1] > 1:
        said.append(f"shard {args.shard[0]}/{args.shard[1]} (requests {args.shard[0]}, {args.shard[0]} + "
                    f"{args.shard[1]}, ...)")
    if args.workers > 1:
        said.append(f"sent by {args.workers} worker processes")
    if args.start_at is not None:
        said.append("from " + datetime.fromtimestamp(args.start_at, timezone.utc).isoformat(timespec="milliseconds"))
    return ", ".join(said) or None


def drawn_rate(args: argparse.Namespace, arrived: int, gaps) -> float | None:
    """The rate of the gaps drawn for this command's `arrived` requests of the schedule (its shard's: requests
    I, I + N, ... of it), from `gaps(n)`, the schedule's first n gaps; None for fewer than two requests."""
    index, shards = args.shard
    if arrived < 2:
        return None
    times = list(itertools.accumulate(gaps(index + shards * (arrived - 1) + 1)))[index::shards]
    return (len(times) - 1) / (times[-1] - times[0]) if times[-1] > times[0] else None


def record(args: argparse.Namespace) -> dict:
    """What a run's JSON keeps for `merge`: the schedule (every option but those a shard may vary), the shard,
    the workers, the start, and the wall clock minus this process's clock (`clock_offset`), which puts its
    records' times on the wall clock."""
    schedule = {k: v for k, v in sorted(vars(args).items()) if k not in NOT_THE_SCHEDULE}
    return {"schedule": schedule, "shard": list(args.shard), "workers": args.workers, "start_at": args.start_at,
            "clock_offset": clock_offset()}


def clock_offset() -> float:
    """time.time() − time.perf_counter(), read back to back: add it to a record's times to put them on the wall
    clock (the tightest of a few readings)."""
    readings = []
    for _ in range(5):
        a, wall, b = time.perf_counter(), time.time(), time.perf_counter()
        readings.append((b - a, wall - (a + b) / 2))
    return min(readings)[1]


def shifted(records: list[RequestRecord], by: float) -> list[RequestRecord]:
    """`records` with every time moved `by` seconds (from one clock to another)."""
    return [replace(r, sent=r.sent + by, token_times=[t + by for t in r.token_times],
                    ended=None if r.ended is None else r.ended + by) for r in records]


def conversations(records: list[RequestRecord]) -> list[list[RequestRecord]]:
    """A part's records cut into its requests of the schedule: a single request, or a conversation's turns."""
    groups: list[list[RequestRecord]] = []
    for r in records:
        if r.turn <= 1 or not groups:
            groups.append([])
        groups[-1].append(r)
    return groups


def interleave(parts: list[list[RequestRecord]]) -> list[RequestRecord]:
    """One record list in the schedule's order from its N interleaved parts (part p's k-th request is the
    schedule's p + kN-th; a part cut short by a duration sent a prefix of its own)."""
    groups = [conversations(p) for p in parts]
    return [r for k in range(max(map(len, groups), default=0)) for g in groups if k < len(g) for r in g[k]]


def split(args: argparse.Namespace, run):
    """`run` (`load.run`, or anything taking its arguments) as this command's share of the schedule: its shard,
    sent by its workers, its concurrency shared out, from its start; an async function with `run`'s arguments."""
    index, shards = args.shard
    if args.workers == 1 and shards == 1 and args.start_at is None:
        return run

    async def sharded(*a, concurrency: int | None = None, **kw) -> list[RequestRecord]:
        if args.workers == 1:
            return await run(*a, concurrency=_share(concurrency, shards, index, 0, 1), part=(index, shards),
                             start_at=args.start_at, **kw)
        jobs = [(run, a, {**kw, "concurrency": _share(concurrency, shards, index, w, args.workers),
                          "part": (index + shards * w, shards * args.workers),
                          "show_progress": kw.get("show_progress", True) and w == 0,
                          "label": f"{kw.get('label', 'requests')} (worker 1 of {args.workers})"})
                for w in range(args.workers)]
        return await in_processes(jobs, args.start_at)

    return sharded


def _share(total: int | None, shards: int, index: int, worker: int, workers: int) -> int | None:
    """Part (index + shards·worker)'s share of a concurrency `total` over shards × workers parts."""
    if total is None:
        return None
    part, parts = index + shards * worker, shards * workers
    return total // parts + (part < total % parts)


async def in_processes(jobs: list[tuple], start_at: float | None = None) -> list[RequestRecord]:
    """Run each job, (run, args, kwargs), in a process of its own, all starting their schedule at `start_at`
    (wall clock; by default `READY_MARGIN` after the last is ready), and return their records on this process's
    clock, in the schedule's order. ValueError with a worker's message if one fails. Cancelled (Ctrl-C), it
    ends the workers: they ignore SIGINT, so that the parent alone decides."""
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no event loop or threads inherited
    ready, begun = context.Barrier(len(jobs) + 1), context.Barrier(len(jobs) + 1)
    start, results = context.Value("d", 0.0), context.Queue()
    workers = [context.Process(target=_worker, args=(w, job, ready, begun, start, results), daemon=True)
               for w, job in enumerate(jobs)]
    for w in workers:
        w.start()
    try:
        try:
            await asyncio.to_thread(ready.wait, 120)
            start.value = start_at if start_at is not None else time.time() + READY_MARGIN
            await asyncio.to_thread(begun.wait, 10)
        except threading.BrokenBarrierError:  # a worker died before it was ready
            raise ValueError("the worker processes did not all start; run with --workers 1 to see why") from None
        found = await _collect(results, workers)
    except BaseException:
        ready.abort()  # no thread is left waiting for a worker that will not come
        begun.abort()
        for w in workers:
            w.terminate()
        raise
    finally:
        for w in workers:
            w.join(timeout=10)
    failed = [f"worker {w + 1}: {out}" for w, out in sorted(found.items()) if isinstance(out, str)]
    if failed:
        raise ValueError("; ".join(failed))
    here = clock_offset()
    return interleave([shifted(found[w][0], found[w][1] - here) for w in range(len(jobs))])


async def _collect(results, workers) -> dict:
    """{worker: what it sent back}, waiting for every worker without holding up the event loop; a worker that
    died without a word fails the run."""
    found: dict = {}
    while len(found) < len(workers):
        try:
            w, out = results.get_nowait()
            found[w] = out
        except queue.Empty:
            dead = [w for w, p in enumerate(workers) if w not in found and not p.is_alive()]
            if dead and results.empty():
                found.update({w: f"ended with exit code {workers[w].exitcode} and no records" for w in dead})
            await asyncio.sleep(0.05)
    return found


def _worker(w: int, job: tuple, ready, begun, start, results) -> None:
    """One worker process: ready, then wait for the shared start, run its job, and send back (w, (records, its
    clock offset)), or (w, the error's message)."""
    run, a, kw = job
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches every process: the parent decides
    try:
        import httpx

        httpx.AsyncClient()  # its first costs (certificates read, modules imported) before the clock, not after
        ready.wait(timeout=120)
        begun.wait(timeout=10)
        records = asyncio.run(run(*a, start_at=start.value, **kw))
        results.put((w, (records, clock_offset())))
    except Exception as e:  # noqa: BLE001  the parent reports it
        results.put((w, f"{type(e).__name__}: {e}"))

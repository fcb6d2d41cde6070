"""`python -m llmperf.bench merge a.json b.json … [--json out.json]`: the shards of one schedule made one run.

Each file is the JSON of `python -m llmperf.bench --shard I/N --start-at T --json FILE` on one machine (`scale`).
The merge checks that they are the N shards of one schedule, each once: the same options (every one but those
a shard may vary: its URL, shard, workers, start and output files), the same model, the same N. It puts every
record on the wall clock (each file keeps its clock's offset from it), interleaves them in the schedule's order
and recomputes every statistic from the records, as one run would (`metrics.summarize`): nothing is averaged
across files. The server's /metrics, scraped by each machine apart, are left out; of the inputs' record, the
source and tokenizer are kept (each shard counted only its own prompts). `--json` writes the merged
run, whose records are on the wall clock; it merges again as a whole schedule (shard 0/1).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from ..metrics import RequestRecord, summarize
from .files import write_json
from .load import achieved_rate
from .report import format_summary
from .scale import interleave, shifted


class MergeError(ValueError):
    """Files that are not the shards of one schedule: the message names them and says what differs."""


def read(path: str) -> dict:
    """One shard's JSON, with what the merge needs; MergeError naming the file otherwise."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise MergeError(f"{path}: cannot be read as JSON ({e}).") from None
    if not isinstance(data, dict) or not isinstance(data.get("scale"), dict) or "requests" not in data:
        raise MergeError(f"{path} is not the JSON of one load run of `python -m llmperf.bench --json` (a sweep's, or "
                         "one older than --shard, has no schedule to merge by).")
    return data


def check(runs: dict[str, dict]) -> int:
    """The number of shards, if `runs` ({path: data}) are every shard of one schedule once; MergeError if not."""
    (first, base), *others = runs.items()
    ours = base["scale"]["schedule"]
    for path, data in others:
        theirs = data["scale"]["schedule"]
        differ = [f"--{k.replace('_', '-')} {ours.get(k)} against {theirs.get(k)}"
                  for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)]
        if differ:
            raise MergeError(f"{first} and {path} ran different schedules ({'; '.join(differ)}): only the shards "
                             "of one command, with the same seed, merge into one run.")
        if data.get("model") != base.get("model"):
            raise MergeError(f"{first} loaded {base.get('model')!r} and {path} {data.get('model')!r}: the shards "
                             "of one run load one model.")
    counts = {data["scale"]["shard"][1] for data in runs.values()}
    if len(counts) > 1:
        raise MergeError(f"The files split the schedule into different numbers of shards ({sorted(counts)}).")
    count = counts.pop()
    held: dict[int, str] = {}
    for path, data in runs.items():
        index = data["scale"]["shard"][0]
        if index in held:
            raise MergeError(f"{held[index]} and {path} are both shard {index}/{count}: give each shard once.")
        held[index] = path
    missing = [f"{i}/{count}" for i in range(count) if i not in held]
    if missing:
        raise MergeError(f"Shard {', '.join(missing)} missing: the merge needs all {count} parts of the schedule.")
    return count


def merge(runs: dict[str, dict]) -> list[RequestRecord]:
    """The records of every shard in `runs` ({path: data}, checked by `check`), on the wall clock, in the
    schedule's order."""
    check(runs)
    parts = sorted(runs.values(), key=lambda data: data["scale"]["shard"][0])
    return interleave([shifted([RequestRecord(**r) for r in data["requests"]], data["scale"]["clock_offset"])
                       for data in parts])


def main(argv: list[str]) -> int:
    """The command (`python -m llmperf.bench merge`, `argv` after "merge"); its exit status."""
    p = argparse.ArgumentParser(prog="python -m llmperf.bench merge", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="each shard's --json file")
    p.add_argument("--json", default=None, help="write the merged run to this file")
    args = p.parse_args(argv)
    try:
        runs = {path: read(path) for path in args.files}
        records = merge(runs)
        schedule = next(iter(runs.values()))["scale"]["schedule"]
        objectives = {k: schedule[f"{k}_slo"] / 1e3 for k in ("ttft", "tpot", "e2e")
                      if schedule.get(f"{k}_slo") is not None} or None
        summary = summarize(records, objectives, schedule.get("percentiles", "linear"))
    except (MergeError, ValueError, KeyError, TypeError) as e:
        print(f"error: {e if isinstance(e, ValueError) else f'a file lacks {e}'}", file=sys.stderr)
        return 1
    first = next(iter(runs.values()))
    print(f"{first['model']}: {len(runs)} shards merged ({', '.join(args.files)}), "
          f"{len(records)} requests arrived at {achieved_rate(records) or 0:.3g}/s")
    print(format_summary(summary))
    if args.json:
        starts = [data["scale"]["start_at"] for data in runs.values()]
        scale = {"schedule": schedule, "shard": [0, 1], "start_at": starts[0], "clock_offset": 0.0,
                 "workers": sum(data["scale"].get("workers", 1) for data in runs.values()),
                 "merged_from": list(args.files)}
        write_json(args.json, ["merge", *argv], first["url"], first["model"],
                   achieved_rate=achieved_rate(records), scale=scale, summary=asdict(summary),
                   requests=[asdict(r) for r in records],
                   **({"inputs": {k: first["inputs"].get(k) for k in ("source", "tokenizer")}}
                      if isinstance(first.get("inputs"), dict) else {}))
    return 0

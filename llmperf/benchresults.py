"""The benchmark result file: one JSON document per run of a `benchmarks/*.py` script, checked whenever it is read.

    {"format": "llmperf-benchmark", "version": 1, "benchmark": "decode",
     "machine": {"device": "cpu", "device_name": "AMD EPYC", "cpu_name": "AMD EPYC", "cpu_flags": [...],
                 "cpu_count": 2, "torch": "2.13.0+cpu", ...},
     "date": "2026-12-03T12:32:10+00:00", "commit": "efc4b85",
     "command": ["benchmarks/decode.py", "--dtypes", "float32"],
     "results": {"rows": [{...}, ...], ...}}

`machine` is what the run's speed depends on: the device and its name, the
processor's model name, feature flags (those of `host.CPU_FLAGS` it has) and
core count, and the software the script reports (torch, NumPy and its BLAS).
`date` is when the run ended (ISO 8601), `commit` the repository's short commit
hash then (null outside a git checkout), `command` the script and its
arguments. `results` is the script's own: always a list of `rows` (one object
per line of the table it prints), with whatever else it measured beside them.

A file may also hold `transcribed`: {"from": "book/benchmarks.md", "commit":
"e9a499b", "note": "..."}, for figures copied from a page's tables rather than
written by the script; its `commit` is then the commit whose page quoted them.

A file that is not this format, or is newer than this llmperf, is refused with
an error that names it. No torch: the benchmarks page reads these files.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from . import jsonfile
from .host import CPU_FLAGS, cpu_flags, cpu_name

FORMAT = "llmperf-benchmark"
VERSION = 1  # raise on any change an older reader would misread; adding a field is not one
BENCHMARKS = ("decode", "step_anatomy", "serving", "chunked_prefill", "client_ceiling")  # benchmarks/NAME.py, in the page's order
ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "benchmarks" / "results"  # the committed results the benchmarks page shows


class BenchmarkFileError(ValueError):
    """A result file that cannot be read: the message names the file and what is wrong with it."""


def machine(environment: dict) -> dict:
    """The machine a run is on: `environment` (the script's `device.environment`, less its dtype) with the
    processor's model name, the speed-relevant flags it has (in `CPU_FLAGS`' order) and its core count."""
    have = cpu_flags()
    env = {k: v for k, v in environment.items() if k != "dtype"}  # a row names its own dtype
    return {**env, "cpu_name": cpu_name(), "cpu_flags": [f for f in CPU_FLAGS if f in have],
            "cpu_count": environment.get("cpu_count")}


def commit(root: Path = ROOT) -> str | None:
    """The short hash of the commit checked out at `root`, or None outside a git checkout."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def result(benchmark: str, environment: dict, results: dict, argv: list[str] | None = None,
           steal: float | None = None) -> dict:
    """One run's file contents: `results` of benchmarks/`benchmark`.py run with `argv` (default: this process's
    arguments) on this machine, dated now, at this commit; with `steal`, the share of the CPUs' time a hypervisor
    gave to other guests during the run (`host.Steal`), if the machine reports it."""
    argv = sys.argv[1:] if argv is None else argv
    return {"format": FORMAT, "version": VERSION, "benchmark": benchmark, "machine": machine(environment),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": commit(),
            "command": [f"benchmarks/{benchmark}.py", *map(str, argv)], "results": results,
            **({"steal": round(steal, 4)} if steal is not None else {})}


def steal_said(share: float | None) -> str:
    """A run's steal (`host.Steal`) in the words the benchmarks print and the benchmarks page's headings use:
    "1.0% of the CPUs' time stolen by the hypervisor during the run"."""
    if share is None:
        return "no steal reported here (Linux's /proc/stat counts it)"
    return f"{share:.1%} of the CPUs' time stolen by the hypervisor during the run"


def _fail(path, what: str):
    raise BenchmarkFileError(f"{path}: {what}. A result file is written by `python benchmarks/NAME.py --json "
                             "FILE`; rerun it, or remove the file.")


def validate(data, path="benchmark result") -> dict:
    """Check `data` (a parsed file) against the format and return it; BenchmarkFileError names `path` if not.

    What is checked is what the page reads: the format and version, the benchmark's name, the machine's device
    and name, an ISO date, the commit, the command, and rows of objects in the results."""
    jsonfile.check_header(data, path, FORMAT, VERSION, "an llmperf benchmark result", _fail, BenchmarkFileError)
    if data.get("benchmark") not in BENCHMARKS:
        _fail(path, f'"benchmark" must be one of {", ".join(BENCHMARKS)}, got {data.get("benchmark")!r}')
    found = data.get("machine")
    if not (isinstance(found, dict) and isinstance(found.get("device"), str)
            and isinstance(found.get("device_name"), str)):
        _fail(path, '"machine" must be an object with "device" and "device_name"')
    try:
        datetime.fromisoformat(data.get("date"))
    except (TypeError, ValueError):
        _fail(path, f'"date" must be an ISO 8601 date, got {data.get("date")!r}')
    if data.get("commit") is not None and not isinstance(data.get("commit"), str):
        _fail(path, f'"commit" must be a commit hash or null, got {data.get("commit")!r}')
    command = data.get("command")
    if command is not None and not (isinstance(command, list) and all(isinstance(c, str) for c in command)):
        _fail(path, '"command" must be a list of strings (the script and its arguments) or null')
    results = data.get("results")
    if not isinstance(results, dict) or not isinstance(results.get("rows"), list) or not results["rows"]:
        _fail(path, '"results" must be an object with a non-empty list of "rows"')
    if not all(isinstance(row, dict) for row in results["rows"]):
        _fail(path, 'every entry of "results"."rows" must be an object')
    transcribed = data.get("transcribed")
    if transcribed is not None and not (isinstance(transcribed, dict) and isinstance(transcribed.get("from"), str)
                                        and isinstance(transcribed.get("commit"), str)):
        _fail(path, '"transcribed" must be null or an object with "from" and "commit"')
    return data


def load(path) -> dict:
    """Read and check one result file (BenchmarkFileError, naming it, if it is missing or malformed)."""
    return validate(jsonfile.read(path, BenchmarkFileError), Path(path))


def save(data: dict, path) -> Path:
    """Check `data` and write it to `path` as indented JSON (the parent folder is created)."""
    validate(data, Path(path))
    return jsonfile.write(data, path)


def committed(where=None) -> list[tuple[Path, dict]]:
    """Every result file in `where` (default `FOLDER`), loaded and checked, by file name."""
    where = Path(where) if where is not None else FOLDER
    return [(path, load(path)) for path in sorted(where.glob("*.json"))] if where.is_dir() else []


def machine_key(found: dict) -> tuple:
    """What makes two runs' machines the same one: the device, its name, the processor, its flags and cores."""
    return (found["device"].split(":")[0], found["device_name"], found.get("cpu_name"),
            tuple(found.get("cpu_flags") or ()), found.get("cpu_count"))


def latest(files: list[tuple[Path, dict]], benchmark: str) -> list[tuple[Path, dict]]:
    """The newest run of `benchmark` on each machine among `files`: GPUs first, then newest first."""
    newest: dict[tuple, tuple[Path, dict]] = {}
    for path, data in files:
        if data["benchmark"] != benchmark:
            continue
        key = machine_key(data["machine"])
        if key not in newest or _when(data) > _when(newest[key][1]):
            newest[key] = (path, data)
    runs = sorted(newest.values(), key=lambda run: _when(run[1]), reverse=True)
    return sorted(runs, key=lambda run: not run[1]["machine"]["device"].startswith("cuda"))


def _when(data: dict) -> datetime:
    when = datetime.fromisoformat(data["date"])
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)

"""The fused model's host-dependent choices, measured on the host that runs it and kept for the next time.

How the NumPy step's weights are stored decides which of OpenBLAS's two gemv kernels multiplies them (`blas`):
input-major storage, (in, out), runs the kernel that adds rows; output-major, (out, in), the one that takes a
dot product per output. And a matrix too small for OpenBLAS to split over its threads can be padded with zero
rows until it is split (`blas.threaded_gemv_rows`). Which is faster depends on the processor, its caches, the
BLAS build and the thread count: the last round fixed the answers on one Intel host, and on an AMD host they
were not the best. So `choose` times each way on this host, with random matrices of each shape, and keeps the
fastest. Each is timed as the step meets it, streamed from memory (`measure`).

A choice is measured once per host and kept in a JSON file (~/.cache/llmperf/numpy-step.json, or under
$LLMPERF_CACHE_DIR), keyed by what it depends on: the processor's model name and its vector and matrix flags,
NumPy's BLAS with its version, and OpenBLAS's thread count. A new processor, BLAS or thread count measures
again. `timings` returns what was measured, for a benchmark to print.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from ..host import cpu_flags, cpu_name
from . import blas

WAYS = ("input-major", "output-major", "output-major, padded")
"""How a matrix can be stored for the NumPy step. Padding applies to output-major storage of a matrix under
OpenBLAS's one-thread line whose extra outputs the step cuts off (wo's)."""

FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile",
         "amx_bf16", "neon", "asimd", "sve")
"""The processor flags a gemv's speed can depend on: its vector width and instruction sets."""

REPEATS = 15  # timed products per way, interleaved


def host_key() -> str:
    """What a choice depends on, as one string: the processor, its flags of `FLAGS`, NumPy's BLAS (and the
    kernels $OPENBLAS_CORETYPE forces, if set), its threads."""
    flags = sorted(cpu_flags() & set(FLAGS))
    kernels = os.environ.get("OPENBLAS_CORETYPE")  # OpenBLAS told to use another processor's kernels
    return (f"{cpu_name()} [{' '.join(flags)}] | {blas.numpy_blas()}" + (f" ({kernels} kernels)" if kernels else "")
            + f" | {blas.openblas_threads()} threads")


def cache_file() -> Path:
    """Where the choices are kept: $LLMPERF_CACHE_DIR/numpy-step.json, else ~/.cache/llmperf/numpy-step.json."""
    folder = os.environ.get("LLMPERF_CACHE_DIR") or Path.home() / ".cache" / "llmperf"
    return Path(folder) / "numpy-step.json"


def _load() -> dict:
    try:
        return json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}  # no file yet, or one this version cannot read: measure again


def _save(kept: dict) -> None:
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(kept, indent=1))
    except OSError:
        pass  # a read-only home: the choice is measured again next time, nothing worse


def candidates(rows: int, cols: int, paddable: bool) -> list[str]:
    """The ways worth timing for a (rows, cols) matrix: both layouts, and padding where it can lift the matrix
    over OpenBLAS's one-thread line (`blas.threaded_gemv_rows`)."""
    ways = list(WAYS[:2])
    if paddable and blas.threaded_gemv_rows(rows, cols, blas.openblas_threads()) > rows:
        ways.append(WAYS[2])
    return ways


def last_level_cache() -> int:
    """Bytes of the processor's largest cache (Linux's sysfs), or 32 MiB where it cannot be read."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:].upper(), 1)
        sizes.append(int(text.rstrip("KMGkmg")) * unit)
    return max(sizes, default=32 * 2**20)


def measure(rows: int, cols: int, ways: list[str]) -> dict[str, float]:
    """Median seconds of one float32 gemv of a (rows, cols) matrix stored each way, as the step meets it: from
    memory, not from a cache. A step reads every weight once, so each timed product takes the next of enough
    copies of the matrix to overflow the largest cache (up to 256 MiB of them per way); the ways take turns,
    so that a drifting machine affects them alike."""
    size = rows * cols * 4
    copies = max(2, -(-min(max(2 * last_level_cache(), 64 * 2**20), 256 * 2**20) // size))
    padded_rows = blas.threaded_gemv_rows(rows, cols, blas.openblas_threads())
    make = {"input-major": lambda: np.ones((cols, rows), np.float32).T,  # (out, in) view of (in, out) storage
            "output-major": lambda: np.ones((rows, cols), np.float32),
            "output-major, padded": lambda: np.ones((padded_rows, cols), np.float32)}
    stored = {way: [make[way]() for _ in range(copies)] for way in ways}
    x = np.ones(cols, np.float32)
    times: dict[str, list[float]] = {way: [] for way in ways}
    rounds = max(REPEATS, min(copies, 60))
    for i in range(rounds + 2):  # the first two rounds warm up
        for way in ways:
            matrix = stored[way][i % copies]
            start = time.perf_counter()
            matrix @ x
            times[way].append(time.perf_counter() - start)
    return {way: statistics.median(t[2:]) for way, t in times.items()}


def choose(name: str, rows: int, cols: int, paddable: bool = False) -> str:
    """How to store the (rows, cols) matrix `name` (an entry of `WAYS`), measured on this host the first time
    and read from the cache after."""
    kept = _load()
    here = kept.setdefault(host_key(), {})
    key = f"{name} {rows}x{cols}" + (" paddable" if paddable else "")
    if key not in here:
        times = measure(rows, cols, candidates(rows, cols, paddable))
        here[key] = {"chosen": min(times, key=times.get), "seconds": times}
        _save(kept)
    return here[key]["chosen"]


def timings() -> dict[str, dict]:
    """This host's choices and what they were measured at: {matrix: {"chosen": way, "seconds": {way: s}}}."""
    return _load().get(host_key(), {})


def report() -> str:
    """This host's choices as lines of text, each with its timings in µs, for a benchmark to print."""
    lines = [f"NumPy step layouts on {host_key()} (measured here, kept in {cache_file()}):"]
    for matrix, seen in timings().items():
        said = ", ".join(f"{way} {s * 1e6:,.0f} µs" for way, s in seen["seconds"].items())
        lines.append(f"  {matrix}: {seen['chosen']} ({said})")
    return "\n".join(lines)

"""The fused model's host-dependent choices: the candidates, the timing in turns, and the file that saves each
choice per host.

How the NumPy step's weights are stored decides which of OpenBLAS's two gemv kernels multiplies them (`blas`):
input-major storage, (in, out), runs the kernel that adds rows; output-major, (out, in), the one that takes a
dot product per output. And a matrix too small for OpenBLAS to split over its threads can be padded with zero
rows until it is split (`blas.threaded_gemv_rows`). Which is faster depends on the processor, its caches, the
BLAS build and the thread count, so no rule fixed in advance is right on every host: each choice is measured on
the host that runs it, and an option is chosen only where it measured fastest there.

The layouts are measured in the step itself: `choices.measured_layouts` builds the step with a first guess
(`first_guess`), then for each kind of matrix (wqkv, wo, w13, w2, head) times whole steps with that kind stored
in each layout it may take (`candidates`), the layouts taking turns so that a drifting machine affects them alike
(`time_in_step`), and keeps the fastest before it tries the next kind. Whole steps, not a gemv timed alone: a
product timed on its own runs with other neighbours in the caches and the memory system than in the step, and
need not rank the layouts as the step does.

A server's model also decides whether products of several rows (a batch's decode step, a prompt's prefill)
read weights packed once (`packing`) or PyTorch's own product packs them at every call: `choices.measured_products`
times both, in turns, and keeps the faster (`saved_choice(PRODUCTS, ...)`, `save_choice`). And a product of two
rows can take longer than one of three or four (a library's kernel for few rows is not its best):
`choices.measured_fewest_rows` times a two-row step with its products given 2, 3 and 4 rows (zero rows appended)
and keeps the fastest (`saved_choice(FEWEST_ROWS, ...)`).

Before all of these, the thread count: a memory-bound product needs enough threads to draw the memory's bandwidth,
and every thread more must be woken and waited for at each of the step's products (four a layer, and the head).
`choices.measured_threads` times whole batch-1 steps with OpenBLAS on each of `thread_counts` (1, 2, 4, ... and every
thread it would start), in turns, keeps the fastest (`saved_choice(THREADS, ...)`, keyed by the threads OpenBLAS
would start); the model's steps run OpenBLAS on it (`NumpyDecodeStep.threads`, `blas.use_threads`). The layouts are
then measured, and saved, for that count.

The choices are saved in a JSON file (~/.cache/llmperf/numpy-step-layouts.json, or under $LLMPERF_CACHE_DIR), keyed
by what they depend on: the processor's model name and its vector and matrix flags, NumPy's BLAS with its version
(and the kernels $OPENBLAS_CORETYPE forces), OpenBLAS's thread count, and each matrix's shape. A new processor,
BLAS, thread count or model measures again. `report` prints what was measured, for a benchmark.

A choice is saved only if it was measured on a quiet host. A thread that waits for a core holds up every product
split among threads, and the waits differ between the options, so a timing made while another program (or a
hypervisor's other guest) held a core can rank them the other way round, and a saved choice would outlast the load.
`time_in_step` therefore also counts the cores other work held meanwhile (`host.OtherWork`); a choice measured
while they exceeded `QUIET` is used by this process (`saved_choice` finds it) but not written to the file, and
the next process measures it again. `unsaved_said` says so, for a server's banner or a benchmark.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from ..host import CPU_FLAGS, OtherWork, cpu_flags, cpu_name
from . import blas, kernel

LAYOUTS = ("input-major", "output-major", "output-major, padded")
"""How a matrix can be stored for the NumPy step. Padding applies to output-major storage of a matrix under
OpenBLAS's one-thread line whose extra outputs the step cuts off (wo's)."""

ROUNDS, STEPS = 4, 5  # per kind of matrix: rounds of STEPS timed steps for each layout, the layouts in turn

QUIET = 0.25
"""The most cores other work may hold, on average, while a choice is measured (`host.OtherWork`) for the choice
to be saved: well under the one core that a single busy program holds."""


class Timed(dict):
    """What `time_in_step` measured: median seconds of a whole step by option, and `others`, the cores other work
    held meanwhile (`host.OtherWork`; None where the kernel does not say)."""

    def __init__(self, seconds=(), others: float | None = None):
        super().__init__(seconds)
        self.others = others

    def add(self, timed: dict[str, float], label: str) -> None:
        """Add `timed`'s options as "{label}, {option}", keeping the larger `others` where `timed` has one."""
        self.update({f"{label}, {option}": s for option, s in timed.items()})
        if getattr(timed, "others", None) is not None:
            self.others = max(self.others or 0.0, timed.others)


_unsaved: dict[tuple[str, str], dict[str, dict]] = {}
"""{(cache file, host key): {record: ...}}: the choices this process measured while other work held more than
`QUIET` cores, used with that file until the process exits and never written (`_save`)."""


def host_key(threads: int | None = None) -> str:
    """What a choice depends on, as one string: the processor, its flags of `host.CPU_FLAGS`, NumPy's BLAS (and the
    kernels $OPENBLAS_CORETYPE forces, if set), its threads (`threads`, else those it runs on now)."""
    flags = sorted(cpu_flags() & set(CPU_FLAGS))
    kernels = os.environ.get("OPENBLAS_CORETYPE")  # OpenBLAS told to use another processor's kernels
    return (f"{cpu_name()} [{' '.join(flags)}] | {blas.numpy_blas()}" + (f" ({kernels} kernels)" if kernels else "")
            + f" | {threads or blas.openblas_threads()} threads")


def cache_file() -> Path:
    """Where the choices are saved: numpy-step-layouts.json in $LLMPERF_CACHE_DIR, else in ~/.cache/llmperf."""
    folder = os.environ.get("LLMPERF_CACHE_DIR") or Path.home() / ".cache" / "llmperf"
    return Path(folder) / "numpy-step-layouts.json"


def _load() -> dict:
    try:
        return json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}  # no file yet, or one this version cannot read: measure again


def _known(host: str) -> dict[str, dict]:
    """Every choice this process can use for `host`: the file's, and those it measured but did not save."""
    return {**_load().get(host, {}), **_unsaved.get((str(cache_file()), host), {})}


def key(name: str, rows: int, cols: int, paddable: bool) -> str:
    """The cache's name for one matrix of one model: "wqkv 960x576"."""
    return f"{name} {rows}x{cols}" + (" paddable" if paddable else "")


def candidates(rows: int, cols: int, paddable: bool) -> list[str]:
    """The layouts worth timing for a (rows, cols) matrix: both layouts, and padding where it can lift the matrix
    over OpenBLAS's one-thread line (`blas.threaded_gemv_rows`)."""
    layouts = list(LAYOUTS[:2])
    if paddable and blas.threaded_gemv_rows(rows, cols, blas.openblas_threads()) > rows:
        layouts.append(LAYOUTS[2])
    return layouts


def first_guess(rows: int, cols: int, paddable: bool) -> str:
    """The layout a matrix has before its kind is measured: padding where it applies, else input-major for a matrix
    whose output is longer than its input and output-major otherwise. Its own measurement replaces it; until then it
    is the layout the kinds measured first are timed beside."""
    layouts = candidates(rows, cols, paddable)
    if LAYOUTS[2] in layouts:
        return LAYOUTS[2]
    return "input-major" if rows > cols else "output-major"


def first_guesses(shapes: dict[str, tuple[int, int, bool]]) -> dict[str, str]:
    """`first_guess` for each matrix of {name: (rows, cols, paddable)}: the layouts a step is built with before
    anything is measured."""
    return {name: first_guess(*shape) for name, shape in shapes.items()}


def saved_layouts(shapes: dict[str, tuple[int, int, bool]]) -> dict[str, str] | None:
    """The layouts saved for this host and these matrices ({name: (rows, cols, paddable)}), or None if any is
    missing."""
    here = _known(host_key())
    names = {name: key(name, *shape) for name, shape in shapes.items()}
    if not all(k in here for k in names.values()):
        return None
    return {name: here[k]["chosen"] for name, k in names.items()}


def save_layouts(shapes: dict[str, tuple[int, int, bool]], layouts: dict[str, str],
                 seconds: dict[str, dict[str, float]]) -> None:
    """Save this host's measured layouts and their step times; a read-only home only means measuring next time."""
    _save({key(name, *shape): {"chosen": layouts[name], "step seconds": seconds.get(name, {})}
           for name, shape in shapes.items()})


PRODUCTS, FEWEST_ROWS, THREADS, KERNEL, KERNEL_ROWS, AT_ONCE = (
    "several rows", "fewest rows", "threads", "batch-1 step", "kernel's most rows", "kernel's rows at once")
"""What `saved_choice` and `save_choice` read and write for a model's matrices: how products of several rows are run
("packed" or "plain", `choices.measured_products`), the fewest rows a batch step's products are given
(`choices.measured_fewest_rows`), the threads OpenBLAS runs the step's products on (`choices.measured_threads`),
where the batch-1 step runs ("BLAS": NumPy's code, its products in NumPy's BLAS; or `COMPILED`: the compiled step,
`compiled_step`; `choices.measured_kernel`; "kernel" in results saved before the step was compiled whole), the
most rows a batch step's products run in the compiled kernel (`choices.measured_kernel_rows`), and the weight rows
the compiled kernel takes in one pass (`choices.measured_at_once`)."""

COMPILED = "compiled"
"""The layout of every matrix when the step's products run in the compiled kernel (`kernel`): as it is, (out, in)."""


def thread_counts(available: int) -> list[int]:
    """The thread counts worth timing where OpenBLAS would start `available` threads: 1, 2, 4, ... below it, and
    `available` itself."""
    counts = [1 << i for i in range(available.bit_length()) if 1 << i < available]
    return counts + [available]


def threads_name(threads: int) -> str:
    """A thread count as `report` prints it: "1 thread", "4 threads"."""
    return f"{threads} thread" + ("s" if threads != 1 else "")


def rows_name(rows: int) -> str:
    """A number of weight rows as `report` prints it: "1 row", "4 rows"."""
    return f"{rows} row" + ("s" if rows != 1 else "")


def choice_key(what: str, shapes: dict[str, tuple[int, int, bool]]) -> str:
    """The cache's name for one choice (`PRODUCTS`, `FEWEST_ROWS`) about a model's matrices."""
    return f"{what}: " + ", ".join(key(name, *shape) for name, shape in shapes.items())


def saved_choice(what: str, shapes: dict[str, tuple[int, int, bool]], threads: int | None = None):
    """The choice `what` saved for this host (`host_key(threads)`) and these matrices (or measured by this process
    on a busy host, `_unsaved`), or None if not measured yet."""
    return _known(host_key(threads)).get(choice_key(what, shapes), {}).get("chosen")


def save_choice(what: str, shapes: dict[str, tuple[int, int, bool]], chosen, seconds: dict[str, float],
                threads: int | None = None) -> None:
    """Save this host's (`host_key(threads)`) choice `what` for these matrices, and what each candidate was
    measured at."""
    _save({choice_key(what, shapes): {"chosen": chosen, "step seconds": seconds}}, host_key(threads))


def _save(records: dict[str, dict], host: str | None = None) -> None:
    """Write `records` ({record: {"chosen": ..., "step seconds": `Timed`}}) to the file, unless other work held more
    than `QUIET` cores while one was measured: then keep them for this process only (`_unsaved`)."""
    host = host or host_key()
    timed = [r["step seconds"] for r in records.values() if isinstance(r.get("step seconds"), Timed)]
    others = max((t.others or 0.0 for t in timed), default=0.0)
    unsaved = _unsaved.setdefault((str(cache_file()), host), {})
    if others > QUIET:
        unsaved.update({name: {**r, "other work": round(others, 2)} for name, r in records.items()})
        return
    for name in records:
        unsaved.pop(name, None)
    everything = _load()
    everything.setdefault(host, {}).update(records)
    try:
        cache_file().parent.mkdir(parents=True, exist_ok=True)
        cache_file().write_text(json.dumps(everything, indent=1))
    except OSError:
        pass


def time_in_step(step, put_in_step, options: dict[str, object], cache) -> Timed:
    """Median seconds of one whole decode step (`step(token, pos, cache)`) with each option in the step
    (`put_in_step(options[name])`), by name, and the cores other work held meanwhile; the options take turns for
    ROUNDS rounds of STEPS steps, and the first step after each switch is not counted."""
    times: dict[str, list[float]] = {name: [] for name in options}
    with OtherWork() as others:
        for _ in range(ROUNDS):
            for name, option in options.items():
                put_in_step(option)
                for i in range(STEPS + 1):
                    start = time.perf_counter()
                    step(1, 8 + i, cache)
                    if i:
                        times[name].append(time.perf_counter() - start)
    return Timed({name: statistics.median(t) for name, t in times.items()}, others.cores)


def timings() -> dict[str, dict]:
    """This host's choices and what they were measured at: {matrix: {"chosen": option, "step seconds": {option: s}}};
    the thread count first, saved under the threads OpenBLAS would start."""
    return {**_known(host_key(blas.available_threads())), **_known(host_key())}


def unsaved_said() -> str | None:
    """A sentence saying that this process measured choices while other work held cores, so they were not saved
    and the next start measures them again; None if every choice it uses was measured on a quiet host."""
    held = [r["other work"] for (file, _), records in _unsaved.items() if file == str(cache_file())
            for r in records.values()]
    if not held:
        return None
    return (f"{len(held)} of this host's choices were measured while other work held up to {max(held):.2f} of "
            f"its cores, so they are used now but not saved, and the next start measures them again")


def report() -> str:
    """This host's choices as lines of text, each with the step's time for every option, for a benchmark to print."""
    lines = [f"NumPy step layouts on {host_key()} (measured in the step here, kept in {cache_file()}):"]
    for matrix, seen in timings().items():
        said = ", ".join(f"{option} {s * 1e3:.2f} ms" for option, s in seen.get("step seconds", {}).items())
        lines.append(f"  {matrix}: {seen['chosen']}" + (f" (step: {said})" if said else "")
                     + (f"; not saved: other work held {seen['other work']:.2f} cores" if "other work" in seen else ""))
    if kernel.why_not() is not None:
        lines.append(f"  compiled kernel: not here. {kernel.why_not()}")
    return "\n".join(lines)

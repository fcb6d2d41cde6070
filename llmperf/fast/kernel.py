"""The batch-1 step's products as one short loop, compiled by Numba: each weight read once, in order, at the
memory's rate.

At batch 1 every product is a matrix–vector product, out = W·x with W (out, in): each weight is read once and
used for one multiply-add, so the product can go no faster than W's bytes ÷ the memory's bandwidth. `gemv` is
the whole algorithm: W's rows are cut into blocks of `ROWS_PER_BLOCK`, the blocks shared among the threads
(`prange`), and the dot products with x of four rows at a time taken in one pass over the four rows. x (a few
KB) stays in the L1 cache; W streams from memory once. Four rows rather than one: the four sums share each load
of x, and one core keeps four streams of W in flight instead of one, which it can read faster. (Whether it does
is measured, like everything about the kernel.) Numba compiles the loop with LLVM (`fastmath` lets it reorder
the sum, which is what lets it use vector instructions and several sums at once), so the rounding differs from
a BLAS's in the last bits only.

Why a loop of our own, when NumPy's BLAS has a gemv? A library's gemv is tuned for many shapes on many
processors; on a given host some of the step's shapes fall off its fast path (one thread below a size, or a
kernel that streams one layout slower), and `tuning` can only choose among what the library offers. The loop
here treats every shape alike. Whether it wins is measured in the step on the reader's host
(`choices.measured_kernel`), never assumed.

Numba is optional. Without it (or where it cannot compile), `why_not` says why, and the step keeps NumPy's BLAS.
The kernel runs on Numba's own threads, not OpenBLAS's: the two pools would fight over the cores if a step used
both (one pool's threads spin, waiting for work, while the other's compute), so a step runs either all its
products here or all of them in the BLAS (`CompiledMatrix` for the former).
"""

from __future__ import annotations

import functools
import threading

import numpy as np

try:
    import numba
except ImportError:  # the step keeps NumPy's BLAS; why_not() says so
    numba = None

prange = numba.prange if numba is not None else range  # without Numba, gemv runs as plain (slow) Python

ROWS_PER_BLOCK = 64
"""Rows of W one thread takes at a time: enough that the split costs nothing beside the reading, few enough that
SmolLM2's smallest matrix (576 rows) gives every thread of a small machine several blocks."""


AT_ONCE = (4, 1)
"""The weight rows `gemv` may take in one pass over x, the first the default. Four share each load of x among four
sums; one reads each row as a single stream from memory. Which is faster differs from one processor to another,
so the fused model measures both in whole steps on the reader's host (`choices.measured_at_once`)."""


def gemv(w: np.ndarray, x: np.ndarray, out: np.ndarray, at_once: int) -> None:
    """out = w @ x, for w (rows, cols) float32 and C-contiguous, x (cols,), out (rows,): written in place.
    `at_once` rows in one pass over x (`AT_ONCE`): with 4, four sums in registers and one load of x for all four;
    with 1, every row by the one-row loop at the end."""
    rows, cols = w.shape
    blocks = (rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
    for block in prange(blocks):  # the blocks, shared among the threads
        first = block * ROWS_PER_BLOCK
        last = min(rows, first + ROWS_PER_BLOCK)
        fours = first + (last - first) // 4 * 4 if at_once == 4 else first
        for r in range(first, fours, 4):
            t0 = t1 = t2 = t3 = np.float32(0)
            for c in range(cols):  # one pass over rows r..r+3, vectorised
                t0 += w[r, c] * x[c]
                t1 += w[r + 1, c] * x[c]
                t2 += w[r + 2, c] * x[c]
                t3 += w[r + 3, c] * x[c]
            out[r], out[r + 1], out[r + 2], out[r + 3] = t0, t1, t2, t3
        for r in range(fours, last):  # one row at a time: every row, or the block's last rows after the fours
            total = np.float32(0)
            for c in range(cols):
                total += w[r, c] * x[c]
            out[r] = total


def gemm_rows(w: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """out = x @ w.T, for w (rows, cols), x (B, cols), out (B, rows): a few sequences' rows at once, each weight row
    read from memory once and then from the L1 cache for every row of x (what a batch's decode step needs). Four
    weight rows at a time, as `gemv` takes them."""
    rows, cols = w.shape
    for block in prange((rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK):
        first = block * ROWS_PER_BLOCK
        last = min(rows, first + ROWS_PER_BLOCK)
        fours = first + (last - first) // 4 * 4
        for r in range(first, fours, 4):
            for b in range(x.shape[0]):  # rows r..r+3 come from memory for b = 0, from the L1 cache after
                t0 = t1 = t2 = t3 = np.float32(0)
                for c in range(cols):
                    t0 += w[r, c] * x[b, c]
                    t1 += w[r + 1, c] * x[b, c]
                    t2 += w[r + 2, c] * x[b, c]
                    t3 += w[r + 3, c] * x[b, c]
                out[b, r], out[b, r + 1], out[b, r + 2], out[b, r + 3] = t0, t1, t2, t3
        for r in range(fours, last):
            for b in range(x.shape[0]):
                total = np.float32(0)
                for c in range(cols):
                    total += w[r, c] * x[b, c]
                out[b, r] = total


@functools.cache
def _compiled():
    """The loops above compiled (parallel, fastmath, cached on disk by Numba), by name, or the reason they are
    not."""
    if numba is None:
        return "Numba is not installed (pip install numba); the step's products run in NumPy's BLAS."
    try:
        options = dict(parallel=True, fastmath=True, cache=True, nogil=True)
        kernels = {"gemv": numba.njit(**options)(gemv), "gemm_rows": numba.njit(**options)(gemm_rows)}
        w = np.ones((2, 3), np.float32)  # compile now, not inside a timed step
        kernels["gemv"](w, np.ones(3, np.float32), np.empty(2, np.float32), AT_ONCE[0])
        kernels["gemm_rows"](w, np.ones((2, 3), np.float32), np.empty((2, 2), np.float32))
        return kernels
    except Exception as error:  # LLVM or the threading layer failed on this machine: say so, keep the BLAS
        return (f"Numba could not compile the kernel here ({type(error).__name__}: {error}); the step keeps "
                "NumPy's BLAS.")


def why_not() -> str | None:
    """Why the compiled kernel cannot run here, or None if it can (compiling it, the first time: about a second)."""
    found = _compiled()
    return found if isinstance(found, str) else None


def use_threads(threads: int) -> None:
    """Run the kernel on `threads` of Numba's threads from now on, in the calling thread (Numba's count is kept per
    calling thread), never more than Numba started."""
    threads = max(1, min(threads, numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != threads:
        numba.set_num_threads(threads)


def threading_layer() -> str:
    """The threads Numba runs the kernel on ("omp", "tbb" or "workqueue"), once it has run."""
    try:
        return numba.threading_layer()
    except (AttributeError, ValueError):
        return "none yet"


def set_at_once(matrices: list, rows: int, compiled: bool) -> None:
    """Have every one of a step's `matrices` take `rows` weight rows in one pass (`AT_ONCE`): `CompiledMatrix`es,
    where the step's products run `compiled`."""
    if not compiled or rows not in AT_ONCE:
        raise ValueError(f"The compiled kernel takes {' or '.join(map(str, AT_ONCE))} rows at once, in a step whose "
                         f"products it runs (this one's: compiled={compiled}), not {rows}.")
    for matrix in matrices:
        matrix.at_once = rows


_one_at_a_time = threading.Lock()
"""Held while the kernel runs: Numba's "workqueue" threads (its fallback where neither OpenMP nor TBB is found)
abort the process if two Python threads launch parallel kernels at once (two servers in one notebook). Taking an
unheld lock costs well under a microsecond."""


class CompiledMatrix:
    """A weight (out, in), float32, as the step multiplies it with the compiled kernel: `h @ m` and `m @ h` both
    give W·h, (out,), so the step's expressions are the same whichever way its weights are stored. (With
    `__array_ufunc__ = None`, NumPy hands `h @ m` to `m.__rmatmul__`.) Holds the weight, not a copy, and the rows
    `gemv` takes in one pass (`at_once`, one of `AT_ONCE`)."""

    __array_ufunc__ = None

    def __init__(self, weight: np.ndarray):
        if why_not() is not None:
            raise RuntimeError(why_not())
        if weight.dtype != np.float32 or weight.ndim != 2 or not weight.flags.c_contiguous:
            raise ValueError(f"The compiled kernel reads a C-contiguous 2-D float32 matrix, not {weight.dtype} "
                             f"{weight.shape} (C-contiguous: {weight.flags.c_contiguous}).")
        self.weight = weight
        self.shape = weight.shape
        self.at_once = AT_ONCE[0]

    def __matmul__(self, x: np.ndarray) -> np.ndarray:
        out = np.empty(self.shape[0], np.float32)
        with _one_at_a_time:
            _compiled()["gemv"](self.weight, x, out, self.at_once)
        return out

    __rmatmul__ = __matmul__

    def rows(self, x: np.ndarray) -> np.ndarray:
        """x (B, in) times W transposed: (B, out), each weight read once for all B rows."""
        out = np.empty((x.shape[0], self.shape[0]), np.float32)
        with _one_at_a_time:
            _compiled()["gemm_rows"](self.weight, np.ascontiguousarray(x), out)
        return out

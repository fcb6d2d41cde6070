"""What NumPy's BLAS does with a one-row product (gemv), and how the fused model's weights are laid out for it.

OpenBLAS (in NumPy's PyPI wheels) gives a small gemv one thread, and has two gemv
kernels, chosen by the matrix's layout. `threaded_gemv_rows` and `input_major`
are the two layouts of a matrix other than as it is stored; `tuning` measures which
one this host multiplies fastest. How many threads OpenBLAS runs a product on is
read and set with threadpoolctl (`openblas_threads`, `limit_threads`); `tuning`
measures that too.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import torch

from .. import hugepages


OPENBLAS_ONE_THREAD_BELOW = 115_200 * 4
"""OpenBLAS runs a float32 gemv on one thread when its matrix has fewer elements than this (its interface/gemv.c:
115,200 × GEMM_MULTITHREAD_THRESHOLD, which is 4 unless OpenBLAS was built otherwise), as in NumPy 2.4's
scipy-openblas 0.3.31."""


@functools.cache
def numpy_blas() -> str:
    """The BLAS NumPy was built with, name and version, as np.show_config reports it ("scipy-openblas 0.3.31...")."""
    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()


def numpy_uses_openblas() -> bool:
    """Is NumPy's BLAS OpenBLAS (as in the PyPI wheels)? Only then does `OPENBLAS_ONE_THREAD_BELOW` apply."""
    return "openblas" in numpy_blas().lower()


def available_threads() -> int:
    """The threads OpenBLAS starts: $OPENBLAS_NUM_THREADS (or $GOTO_NUM_THREADS, $OMP_NUM_THREADS) if set, else
    one per core this process may run on. PyTorch's own count (torch.set_num_threads) does not change it."""
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(name, "").strip().isdigit():
            return max(1, int(os.environ[name]))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@functools.cache
def _openblas():
    """threadpoolctl's handle on NumPy's own OpenBLAS, which reads and sets its thread count; None for another
    BLAS (then nothing here can change how many threads a product runs on), or where threadpoolctl is missing (a
    machine that got llmperf's wheel without its dependencies). Where several OpenBLAS are loaded (SciPy's, or
    PyTorch's on some platforms), the one inside NumPy's own folder; else the only one."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    if not numpy_uses_openblas():
        return None
    found = ThreadpoolController().select(internal_api="openblas").lib_controllers
    numpys = [lib for lib in found if "numpy" in lib.filepath]
    return numpys[0] if numpys else found[0] if len(found) == 1 else None


def can_limit_threads() -> bool:
    """Can `limit_threads` change the threads NumPy's products run on (NumPy's BLAS is OpenBLAS, and
    threadpoolctl found it)?"""
    return _openblas() is not None


def openblas_threads() -> int:
    """The threads NumPy's OpenBLAS runs a product on now: what it started with (`available_threads`), unless
    `limit_threads` changed it since (threadpoolctl asks OpenBLAS itself)."""
    found = _openblas()
    return found.get_num_threads() if found is not None else available_threads()


def limit_threads(threads: int) -> None:
    """Run NumPy's OpenBLAS products on `threads` threads from now on, in the whole process (threadpoolctl, which
    calls OpenBLAS's own openblas_set_num_threads). Nothing happens with another BLAS. Not while another thread
    is inside one of OpenBLAS's products: a process's fused models that run at once must share one count."""
    found = _openblas()
    if found is not None:
        found.set_num_threads(threads)


def use_threads(threads: int) -> None:
    """`limit_threads(threads)`, unless OpenBLAS runs on that many already (asking costs a few µs)."""
    if openblas_threads() != threads:
        limit_threads(threads)


def threaded_gemv_rows(rows: int, cols: int, threads: int) -> int:
    """Rows to give a (rows, cols) float32 matrix so that OpenBLAS's gemv splits it over `threads` threads.

    A matrix below `OPENBLAS_ONE_THREAD_BELOW` elements gets one thread, which draws less of the memory's
    bandwidth than several. Zero rows appended lift it over the line: more bytes to read, at up to `threads`
    times the rate. The rule: pad while the padded matrix is at most 1.5 times the size; otherwise, or with one
    thread, or with another BLAS, the matrix keeps its rows. Whether the step uses the padded matrix is measured
    (`tuning.candidates`).
    """
    if threads < 2 or rows * cols >= OPENBLAS_ONE_THREAD_BELOW or not numpy_uses_openblas():
        return rows
    padded = -(-OPENBLAS_ONE_THREAD_BELOW // cols)  # ceil: the fewest rows that reach the line
    return padded if padded <= 1.5 * rows else rows


def input_major(weight: torch.Tensor) -> torch.Tensor:
    """`weight` (out, in) as an (out, in) view of an (in, out) copy.

    NumPy's product `h @ W` with W stored (in, out), one row per input, runs OpenBLAS's "N" gemv kernel:
    it adds x[i] times row i to the output, and streams long rows. `W @ h` with W stored (out, in) runs
    its "T" kernel: one dot product per output, over rows as long as the input. Which is faster for a shape
    depends on the host; `tuning` measures it, and `choices.in_layout` calls this where input-major won. PyTorch
    reads the view.
    """
    return hugepages.contiguous(weight.t()).t()

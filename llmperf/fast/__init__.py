"""A faster model for decoding: the same weights, fused, and a one-token step that is all memory traffic.

At batch 1 a decode step multiplies one activation row by every weight matrix:
a matrix–vector product (gemv), whose speed is set by how fast the weights
stream out of memory. A step can take no less than its bytes ÷ bandwidth; four
things keep the plain model in model.py well above that.

1. Seven products per layer where four will do. q, k and v are products of the
   same input, and so are the gate and up activations of the MLP. `fuse` stacks
   their matrices: one (q_dim + 2·kv_dim, d) matrix and one (2·d_ff, d) matrix per
   layer. Fewer, larger products mean fewer ops per step.
2. A framework's cost per op. A step of the plain model runs about 1,600 PyTorch
   ops, most of them on vectors of a few hundred numbers, and each has a fixed
   cost to dispatch, whatever its size (chapter 5 measures it, and the share of
   the step it takes, on the reader's machine). So a cached step of one token of
   one sequence, float32 on a CPU, is written in NumPy (`NumpyDecodeStep`), whose
   small ops cost far less each: the same
   arithmetic as model.py, on the same weights and on the KV cache's own
   buffers (Tensor.numpy() shares memory: the cache stays the one PyTorch
   prefilled and reads).
3. The gemv kernel. NumPy's bundled BLAS (OpenBLAS in the PyPI wheels) has a true
   gemv that splits a product over every core (benchmarks/decode.py sets it
   against PyTorch's one-row product on the same machine). OpenBLAS has two
   gemv kernels, and the layout of the matrix picks one: input-major storage,
   (in, out), the kernel that adds rows; output-major, (out, in), the one that
   takes a dot product per output. Which streams a given shape faster depends
   on the processor, so `fuse` stores each matrix as this host multiplies it
   fastest: measured in the step the first time, and saved per host if the host
   was quiet meanwhile (`tuning`).
4. Products too small to share. OpenBLAS gives a gemv of fewer than 460,800
   elements one thread (`OPENBLAS_ONE_THREAD_BELOW`), and one thread draws less
   of the memory's bandwidth than several. SmolLM2's wo (576 × 576) is one; it
   may be stored with zero rows appended (`threaded_gemv_rows`): 39 % more
   bytes, read by every thread instead of one. `tuning` measures which wins.
5. A library's gemv is not the roof either: tuned for every shape on every processor, it leaves some shapes
   off its fast path on a given host, and the layouts above choose only among what it offers. `kernel` holds
   the product as a short loop that Numba compiles (each thread streams its own rows of W once, one row or
   four per pass, whichever `choices.measured_at_once` finds faster here), and `choices.measured_kernel`
   times whole steps with the step's products all in it and all in the BLAS, in turns, and keeps the faster
   on this host. All or none: the compiled loop runs on Numba's threads, and two
   pools of threads in one step fight over the cores. Where the products run compiled, so does the rest of the
   step (`compiled_step`: one compiled call per layer): between two products that stream megabytes through
   the caches, a few dozen small NumPy calls find their own code and data evicted, each time. Without Numba
   the BLAS stays, and `tuning.report` says why.

6. A thread that loses its core. Every product waits for its slowest thread, so when another program (or, in
   a virtual machine, another guest) takes a core, the thread count measured fastest on a quiet machine can
   run slower than fewer threads. `threads.ThreadCount` times the batch-1 step as it runs, tries the other
   count for one step when the steps slow down, and keeps whichever is faster.

What is left is the products plus the small NumPy ops between them
(`profiling.numpy_step_times` splits a step; chapter 5 shows it);
benchmarks/decode.py sets the step against llama.cpp's in the same run.
The extra memory: the fused matrices (q, k, v, gate and up again), and for the
NumPy step a copy of each matrix stored otherwise than the plain model's.

A server's decode step, one new token for each of B sequences at their own
positions, runs as NumPy code too (`NumpyDecodeStep.batch`): the small ops on
all B rows at once, and each product one matrix product over the B rows, so
that each weight is read once per step for all of them. A matrix product
copies ("packs") its weight into tiles before it multiplies, which for a few
rows costs as much as the product; `fuse(model, pack=True)` packs every weight
once, with oneDNN (`packing`), and the batch's products and a prompt's prefill
read the packed copies, where a measurement on this host finds that faster
(`tuning`). Where the batch-1 products run compiled, a batch of a few rows does
too (`kernel.gemm_rows`: each weight row read once from memory, then from the
L1 cache for every sequence), up to the most rows at which it measured faster
than the library's product (`choices.measured_kernel_rows`).
The server (`llmperf.serve`) decodes with the fused model, packed.

Everything else keeps PyTorch's product on the same weights (or their packed
copies): prompts (several positions make a matrix–matrix product, which PyTorch
spreads over the cores), bfloat16 (NumPy has no such type) and float16 (NumPy has no BLAS
kernel for it), GPUs, and calls with autograd on (NumPy carries no gradients;
generate() and stream() run under inference_mode). The plain model stays the
one to read; this one is tested to give the same logits and the same tokens.

After a NumPy product OpenBLAS's threads spin, waiting for the next one;
PyTorch work that uses every thread runs slowly meanwhile (the two thread pools
fight over the cores). By default they spin for 2**28 cycles, about a tenth of
a second at a few GHz, long enough to slow a prefill that starts right after
decode steps. Importing llmperf sets OPENBLAS_THREAD_TIMEOUT=18 (2**18 cycles,
about 0.1 ms) unless it is set: longer than the gaps between one step's
products, so a step keeps its threads awake, and short enough that they sleep
before the next PyTorch work; but only if llmperf is imported before NumPy,
which reads it when it loads OpenBLAS. Otherwise give anything
timed right after a fused step a few warm-up steps
(`timing.time_in_turns(..., settle=3)`; benchmarks/decode.py runs the fused
model last). torch.profiler does not see NumPy's work: profile the plain model
to count a step's ops, and time the NumPy step with `profiling.numpy_step_times`.

The package's modules: `fused` (the fused layers, `FusedTransformer`, `fuse`),
`numpy_step` (`NumpyDecodeStep`), `blas` (what OpenBLAS does with a gemv),
`packing` (weights packed once for products of several rows), `kernel` (the
compiled product), `compiled_step` (the batch-1 step's layer compiled whole),
`choices` (the thread count, the layouts, the kernel and the
packing, each measured in the step on this host), `tuning` (the candidates,
the timing in turns, and the file that saves each choice per host) and `threads`
(the batch-1 step's thread count, chosen again as the machine's load changes).
"""

from __future__ import annotations

import weakref

from .blas import (OPENBLAS_ONE_THREAD_BELOW, available_threads, input_major, limit_threads,  # noqa: F401
                   numpy_blas, numpy_uses_openblas, openblas_threads, threaded_gemv_rows)
from .fused import FusedAttention, FusedFeedForward, FusedTransformer, fuse, linear  # noqa: F401
from .numpy_step import NumpyDecodeStep, no_lap  # noqa: F401
from . import choices, kernel, packing, threads, tuning  # noqa: F401


_SERVED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> its fused, packed form


def served(model) -> FusedTransformer:
    """`fuse(model, pack=True)`, the form a server decodes with, made once per model while the model lives: a
    notebook starts several servers of one model, and packing copies every weight (seconds, and as much memory
    again). The servers share only the weights, which they read; each has its own KV pool."""
    if model not in _SERVED:
        _SERVED[model] = fuse(model, pack=True)
    return _SERVED[model]

"""The fused model's host-dependent choices, each measured in the NumPy step itself and saved (`tuning`).

Seven choices, each made the first time a model of its shape runs on a host and saved for the next time:

    measured_threads      how many threads OpenBLAS runs the step's products on
    measured_layouts      how each kind of matrix (wqkv, wo, w13, w2, head) is stored for the step (`in_layout`)
    measured_kernel       whether the batch-1 step runs as NumPy code, its products in NumPy's BLAS (as laid
                          out), or compiled whole, its products in the compiled kernel (`compiled_step`)
    measured_at_once      how many weight rows the compiled kernel takes in one pass (`kernel.AT_ONCE`)
    measured_products     whether products of several rows read weights packed once (`packing`) or run
                          PyTorch's own product
    measured_fewest_rows  the fewest rows a batch step's products are given (zero rows appended)
    measured_kernel_rows  the most rows a batch step's products run in the compiled kernel (more: the library's)

Each times whole steps with every candidate, the candidates taking turns (`tuning.time_in_step`), and chooses
the fastest. Nothing here builds a fused model: the threads and the layouts are timed on a step that the
caller's `build_step(model, layouts)` builds (`fused.numpy_step_of`), the products and the rows on the caller's
fused model. `in_layout` and `step_array` say how one matrix is laid out for the step and what view it reads.
"""

from __future__ import annotations

import torch

from .. import hugepages
from ..model import Transformer
from . import blas, compiled_step, kernel, tuning
from .numpy_step import MATRICES


def in_layout(weight: torch.Tensor, layout: str | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`weight`, (out, in), stored `layout` (`tuning.LAYOUTS`, or `tuning.COMPILED`) for the NumPy step: as it is
    (output-major, the compiled kernel's, or None: not for NumPy), as an (out, in) view of an (in, out) copy
    (input-major, `blas.input_major`), or as a view of the first rows of a copy with zero rows appended
    (`blas.threaded_gemv_rows`). Returns (the weight PyTorch reads, the padded copy or None)."""
    if layout == "input-major":
        return blas.input_major(weight), None
    if layout == "output-major, padded":
        rows = blas.threaded_gemv_rows(*weight.shape, blas.openblas_threads())
        padded = hugepages.cat([weight.detach(), weight.new_zeros(rows - weight.shape[0], weight.shape[1])])
        return padded[:weight.shape[0]], padded  # (out, in): a view of the padded copy, (rows, in)
    return weight, None


def sources(model: Transformer) -> dict[str, list[torch.Tensor]]:
    """Each kind of matrix the NumPy step multiplies, (out, in), one per layer (the head: one): what `in_layout`
    lays out."""
    return {"wqkv": [torch.cat([b.attention.wq.weight, b.attention.wk.weight, b.attention.wv.weight])
                     for b in model.layers],
            "wo": [b.attention.wo.weight for b in model.layers],
            "w13": [torch.cat([b.feed_forward.w1.weight, b.feed_forward.w3.weight]) for b in model.layers],
            "w2": [b.feed_forward.w2.weight for b in model.layers],
            "head": [model.output.weight]}


def matrices(model: Transformer) -> dict[str, tuple[int, int, bool]]:
    """{kind: (rows, cols, paddable)} of the step's matrices, read off the config (nothing is concatenated, as
    `sources` does); wo's extra outputs are cut off, so it may be padded."""
    cfg = model.cfg
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    return {"wqkv": (q + 2 * kv, cfg.d_model, False), "wo": (cfg.d_model, q, True),
            "w13": (2 * cfg.d_ff, cfg.d_model, False), "w2": (cfg.d_model, cfg.d_ff, False),
            "head": (cfg.vocab_size, cfg.d_model, False)}


def step_array(name: str, weight: torch.Tensor, padded: torch.Tensor | None):
    """The NumPy view the step multiplies: (in, out) for the `h @ W` products (wqkv, w13, head), (out, in) or
    padded (rows, in) for the `W @ h` ones (wo, w2), as `NumpyDecodeStep.set_matrix` takes them."""
    array = (padded if padded is not None else weight).detach().numpy()
    return array.T if name in ("wqkv", "w13", "head") else array


@torch.no_grad()
def measured_layouts(model: Transformer, build_step) -> dict[str, str]:
    """How to store each kind of matrix for the NumPy step on this host: saved from an earlier measurement, or
    measured now and saved. The step is `build_step(model, layouts)` with the first guesses' layouts; each kind in
    turn is timed in each layout it may take (`tuning.candidates`), and the fastest stays in the step while the
    next kind is timed."""
    from ..generation import new_cache

    shapes = matrices(model)
    layouts = tuning.saved_layouts(shapes)
    if layouts is not None:
        return layouts
    layouts = tuning.first_guesses(shapes)
    step = build_step(model, layouts)
    cache, seconds = new_cache(model, 1, 32), {}
    for name, weights in sources(model).items():
        arrays = {layout: [step_array(name, *in_layout(w, layout)) for w in weights]
                  for layout in tuning.candidates(*shapes[name])}
        seconds[name] = tuning.time_in_step(step, lambda a, name=name: step.set_matrix(name, a), arrays, cache)
        layouts[name] = min(seconds[name], key=seconds[name].get)
        step.set_matrix(name, arrays[layouts[name]])
    tuning.save_layouts(shapes, layouts, seconds)
    return layouts


@torch.no_grad()
def measured_kernel(model: Transformer, build_step, layouts: dict[str, str]) -> str:
    """Where the batch-1 step runs on this host: "BLAS" (NumPy's code, its products in NumPy's BLAS, its matrices
    stored as `layouts`) or `tuning.COMPILED` (the step compiled whole, `compiled_step`, its products in the
    compiled kernel, every matrix as it is): saved from an earlier measurement, or measured now, whole steps of
    `build_step(model, layouts)` each way, in turns, and saved. "BLAS", without measuring, where the kernel cannot
    run here (`kernel.why_not`). All of a step's products run in one or the other: Numba's threads and OpenBLAS's
    would fight over the cores in a step that used both."""
    from ..generation import new_cache

    shapes = matrices(model)
    if kernel.why_not() is not None:
        return "BLAS"
    chosen = tuning.saved_choice(tuning.KERNEL, shapes)
    if chosen is None:
        at_once = measured_at_once(model, build_step)  # the compiled step at its best here
        step, compiled = build_step(model, layouts), build_step(model, dict.fromkeys(layouts, tuning.COMPILED))
        compiled.at_once = at_once
        options = {"BLAS": (False, {name: step.matrix(name) for name in MATRICES}),  # as `layouts` stored them
                   tuning.COMPILED: (True, {name: compiled.matrix(name) for name in MATRICES})}  # as they are

        def put_in_step(option):
            step.compiled, arrays = option  # compiled: the step sets the kernel's threads
            for name, array in arrays.items():
                step.set_matrix(name, array)

        seconds = tuning.time_in_step(step, put_in_step, options, new_cache(model, 1, 32))
        chosen = min(seconds, key=seconds.get)
        tuning.save_choice(tuning.KERNEL, shapes, chosen, seconds)
    return chosen


@torch.no_grad()
def measured_at_once(model: Transformer, build_step) -> int:
    """How many weight rows the compiled kernel takes in one pass over x on this host (`kernel.AT_ONCE`): saved
    from an earlier measurement, or measured now, whole compiled batch-1 steps of `build_step(model, layouts)` with
    each, in turns, and saved. The products and everything else in the step are the same; only the order in which
    the weights stream from memory differs."""
    from ..generation import new_cache

    shapes, options = matrices(model), {tuning.rows_name(n): n for n in kernel.AT_ONCE}
    chosen = tuning.saved_choice(tuning.AT_ONCE, shapes)
    if chosen not in options:  # not measured yet (or among other options)
        compiled_step.why_not()  # compiled now (several seconds the first time), not inside a timed step
        step = build_step(model, dict.fromkeys(MATRICES, tuning.COMPILED))

        def put_in_step(rows):
            step.at_once = rows

        seconds = tuning.time_in_step(step, put_in_step, options, new_cache(model, 1, 32))
        chosen = min(seconds, key=seconds.get)
        tuning.save_choice(tuning.AT_ONCE, shapes, chosen, seconds)
    return options[chosen]


@torch.no_grad()
def measured_threads(model: Transformer, build_step) -> int:
    """How many threads OpenBLAS runs the NumPy step's products on, on this host: saved from an earlier
    measurement, or measured now, whole batch-1 steps of `build_step(model, layouts)` (the first guesses' layouts)
    at each of `tuning.thread_counts`, in turns, and saved. Leaves OpenBLAS on it (for the layouts' measurement;
    the model's steps set it as they start: `NumpyDecodeStep.threads`). Returns it."""
    from ..generation import new_cache

    available, shapes = blas.available_threads(), matrices(model)
    if not blas.can_limit_threads():
        return available  # another BLAS: its products run on what it starts with
    chosen = tuning.saved_choice(tuning.THREADS, shapes, threads=available)
    counts = tuning.thread_counts(available)
    if chosen is None and len(counts) > 1:
        blas.limit_threads(available)  # the first guess's padding, as for the threads OpenBLAS starts
        step = build_step(model, tuning.first_guesses(shapes))
        options = {tuning.threads_name(n): n for n in counts}
        seconds = tuning.time_in_step(step, blas.limit_threads, options, new_cache(model, 1, 32))
        chosen = options[min(seconds, key=seconds.get)]
        tuning.save_choice(tuning.THREADS, shapes, chosen, seconds, threads=available)
    threads = chosen or available  # none saved, one count to try: what OpenBLAS starts
    blas.limit_threads(threads)
    return threads


@torch.no_grad()
def measured_products(fused, packs: dict) -> str:
    """Measure how this host multiplies several rows (a 32-token prefill and a decode step of 4 sequences,
    timed together) with `fused` (a `fused.FusedTransformer`): by the weights packed once ("packed": `packs`,
    {layer: its packed weight}) or by PyTorch's own product ("plain"), in turns; save and return the faster."""
    from ..generation import new_cache

    rows, prompt = 4, torch.arange(32)[None] % fused.cfg.vocab_size  # (1, 32)
    batch, alone = new_cache(fused, rows, 64), new_cache(fused, 1, 32)

    def work(token, pos, cache):  # a prompt's prefill and a decode step of `rows` sequences
        fused(prompt, torch.arange(32), alone, last_only=True)
        fused.numpy_step.batch([token] * rows, [pos] * rows, batch)

    def set_products(how):
        for layer, pack in packs.items():
            layer.packed = pack if how == "packed" else None

    seconds = tuning.time_in_step(work, set_products, {"plain": "plain", "packed": "packed"}, None)
    chosen = min(seconds, key=seconds.get)
    set_products(chosen)
    tuning.save_choice(tuning.PRODUCTS, matrices(fused), chosen, seconds)
    return chosen


@torch.no_grad()
def measured_fewest_rows(fused, candidates=(2, 3, 4)) -> int:
    """Measure the fewest rows for a batch step's products on this host: a decode step of 2 sequences of `fused`
    (a `fused.FusedTransformer`) with its products given 2, 3 or 4 rows (`NumpyDecodeStep.product` appends zero
    rows), in turns; save the fastest and return it (as `fewest_rows`, 1 when two rows won: no padding)."""
    from ..generation import new_cache

    step = fused.numpy_step

    def two_rows(token, pos, cache):
        step.batch([token] * 2, [pos] * 2, cache)

    def set_fewest_rows(rows):
        step.fewest_rows = rows

    options = {f"{r} rows": r for r in candidates}
    seconds = tuning.time_in_step(two_rows, set_fewest_rows, options, new_cache(fused, 2, 64))
    rows = options[min(seconds, key=seconds.get)]
    rows = 1 if rows == 2 else rows
    set_fewest_rows(rows)
    tuning.save_choice(tuning.FEWEST_ROWS, matrices(fused), rows, seconds)
    return rows


@torch.no_grad()
def measured_kernel_rows(fused, candidates=(2, 4, 8)) -> int:
    """Measure the most rows a batch step's products run in the compiled kernel on this host (`kernel.gemm_rows`;
    more rows go to the library's product, packed or not): decode steps of `fused` (a `fused.FusedTransformer`
    whose batch-1 products run compiled) of each batch in `candidates`, timed with the kernel and with the
    library, in turns; the kernel keeps every batch up to the first where it lost. Saves and returns it (0: none,
    and 0 without measuring where the batch-1 products do not run compiled)."""
    from ..generation import new_cache

    step, rows, seconds = fused.numpy_step, 0, tuning.Timed()
    if not step.compiled:
        return 0

    def set_kernel_rows(most):
        step.kernel_rows = most

    for batch in candidates:
        def batch_step(token, pos, cache, batch=batch):
            step.batch([token] * batch, [pos] * batch, cache)

        timed = tuning.time_in_step(batch_step, set_kernel_rows, {"compiled": batch, "library": 0},
                                    new_cache(fused, batch, 64))
        seconds.add(timed, f"{batch} rows")
        if timed["compiled"] >= timed["library"]:
            break
        rows = batch
    set_kernel_rows(rows)
    tuning.save_choice(tuning.KERNEL_ROWS, matrices(fused), rows, seconds)
    return rows

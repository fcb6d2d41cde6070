"""The compiled kernel (llmperf.fast.kernel) gives the BLAS's products within float32 rounding, the fused model
that runs it gives the plain model's tokens, and whether a step runs it is a measurement on this host, with the
BLAS kept (and said why) where Numba cannot run."""

import numpy as np
import pytest
import torch

from llmperf import generate
from llmperf.fast import choices, fuse, kernel, tuning
from llmperf.fast.fused import FusedTransformer
from llmperf.fast.numpy_step import MATRICES
from llmperf.fast.threads import ThreadCount
from llmperf.generation import new_cache
from tests.test_fast_tuning import faster
from tests.test_model import cached_logits

needs_numba = pytest.mark.skipif(kernel.why_not() is not None, reason=str(kernel.why_not()))


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMPERF_CACHE_DIR", str(tmp_path))


def matrix(rows, cols, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32)


def within_rounding(got, w, x):
    """Does `got` equal x @ w.T (x (B, cols) or (cols,)) within the bound on rounding a sum of cols float32
    products in any order, cols · eps · Σ|w||x| per output (Higham's)?"""
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    bound = w.shape[1] * np.finfo(np.float32).eps * (np.abs(x).astype(np.float64) @ np.abs(w).T) + 1e-30
    return got.shape == exact.shape and got.dtype == np.float32 and bool(np.all(np.abs(got - exact) <= bound))


@needs_numba
@pytest.mark.parametrize("rows, cols", [(1, 1), (63, 5), (130, 77), (576, 576), (960, 576), (577, 1536)])
def test_the_compiled_products_equal_the_blas_within_float32_rounding(rows, cols):
    w, x = matrix(rows, cols), matrix(1, cols, seed=1)[0]
    m = kernel.CompiledMatrix(w)
    assert within_rounding(w @ x, w, x)  # the BLAS's own product, for scale
    for m.at_once in kernel.AT_ONCE:  # four rows a pass, or one
        assert within_rounding(x @ m, w, x) and within_rounding(m @ x, w, x)  # h @ W and W @ h: both W·h
    for batch in (1, 2, 5):  # several rows, each weight read once for all of them
        xs = matrix(batch, cols, seed=2)
        assert within_rounding(m.rows(xs), w, xs)


def test_the_loop_itself_is_the_kernel():
    """The Python function Numba compiles computes the product as written (run here uncompiled, on a small one)."""
    w, x = matrix(70, 9), matrix(1, 9, seed=1)[0]
    for at_once in kernel.AT_ONCE:
        out = np.empty(70, np.float32)
        kernel.gemv(w, x, out, at_once)
        assert within_rounding(out, w, x)
    xs, outs = matrix(3, 9, seed=2), np.empty((3, 70), np.float32)
    kernel.gemm_rows(w, xs, outs)
    assert within_rounding(outs, w, xs)


@needs_numba
@pytest.mark.parametrize("bad, said", [(np.ones((4, 3)), "float64"), (np.ones((3, 4), np.float32).T, "C-contiguous"),
                                       (np.ones(4, np.float32), "2-D")])
def test_a_matrix_the_kernel_cannot_read_is_refused_clearly(bad, said):
    with pytest.raises(ValueError, match=said):
        kernel.CompiledMatrix(bad)


@needs_numba
def test_a_fused_model_on_the_kernel_gives_the_plain_models_logits_and_tokens(tiny, monkeypatch):
    monkeypatch.setattr(tuning, "time_in_step", faster(tuning.COMPILED, []))
    fast = fuse(tiny)
    assert fast.numpy_step.compiled and tuning.saved_choice(tuning.KERNEL, choices.matrices(tiny)) == "compiled"
    assert fast.layers[0].feed_forward.w2.weight is tiny.layers[0].feed_forward.w2.weight  # as it is: no copy
    assert fast.output.weight is tiny.output.weight
    tokens = torch.randint(0, tiny.cfg.vocab_size, (1, 12), generator=torch.Generator().manual_seed(3))
    assert torch.allclose(cached_logits(fast, tokens, 4), cached_logits(tiny, tokens, 4), atol=1e-5)
    assert torch.equal(generate(fast, tokens, 10), generate(tiny, tokens, 10))
    caches = [new_cache(tiny, 2, 8), new_cache(tiny, 2, 8)]  # a batch's step keeps PyTorch's products
    with torch.inference_mode():
        plain = tiny(torch.tensor([[3], [5]]), torch.tensor([[0], [0]]), caches[0])
        fused = fast(torch.tensor([[3], [5]]), torch.tensor([[0], [0]]), caches[1])
    assert torch.allclose(fused, plain, atol=1e-5)


@needs_numba
def test_the_kernel_is_kept_only_where_it_measured_faster(tiny, monkeypatch):
    calls = []
    monkeypatch.setattr(tuning, "time_in_step", faster("BLAS", calls))
    fast = fuse(tiny)
    assert not fast.numpy_step.compiled and ["BLAS", "compiled"] in calls
    assert "batch-1 step: " in tuning.report() and "BLAS 1.00 ms, compiled 2.00 ms" in tuning.report()
    monkeypatch.setattr(tuning, "time_in_step", faster(tuning.COMPILED, calls))
    assert not fuse(tiny).numpy_step.compiled  # kept per host: not measured again
    monkeypatch.setattr(tuning, "host_key", lambda threads=None: "another processor | another BLAS | 2 threads")
    assert fuse(tiny).numpy_step.compiled  # another host measures again, and the kernel won there


@needs_numba
def test_the_rows_the_kernel_takes_at_once_are_measured_here_and_give_the_same_tokens(tiny, monkeypatch):
    calls = []
    monkeypatch.setattr(tuning, "time_in_step", faster("1 row", calls))
    monkeypatch.setattr(choices, "measured_kernel", lambda *args: tuning.COMPILED)
    fast = fuse(tiny)
    assert fast.numpy_step.at_once == 1 and ["1 row", "4 rows"] in calls
    assert tuning.saved_choice(tuning.AT_ONCE, choices.matrices(tiny)) == "1 row"
    assert "kernel's rows at once: " in tuning.report() and "4 rows 2.00 ms, 1 row 1.00 ms" in tuning.report()
    tokens = torch.randint(0, tiny.cfg.vocab_size, (1, 12), generator=torch.Generator().manual_seed(3))
    assert torch.allclose(cached_logits(fast, tokens, 4), cached_logits(tiny, tokens, 4), atol=1e-5)
    assert torch.equal(generate(fast, tokens, 10), generate(tiny, tokens, 10))
    with pytest.raises(ValueError, match="1 or 4 rows at once|4 or 1 rows at once"):
        fast.numpy_step.at_once = 3
    blas_step = FusedTransformer(tiny, dict.fromkeys(MATRICES, "output-major")).numpy_step
    with pytest.raises(ValueError, match="compiled=False"):
        blas_step.at_once = 1


def test_without_numba_the_step_keeps_the_blas_and_says_why(tiny, monkeypatch):
    calls = []
    monkeypatch.setattr(kernel, "_compiled", lambda: "Numba is not installed (pip install numba); ...")
    monkeypatch.setattr(tuning, "time_in_step", faster(tuning.COMPILED, calls))
    fast = fuse(tiny)
    assert not fast.numpy_step.compiled and ["BLAS", "compiled"] not in calls  # nothing measured
    assert "Numba is not installed" in kernel.why_not() and "Numba is not installed" in tuning.report()


@needs_numba
def test_a_batch_step_on_the_kernel_gives_the_plain_models_logits(tiny, monkeypatch):
    monkeypatch.setattr(tuning, "time_in_step", faster(tuning.COMPILED, []))
    fast = fuse(tiny, pack=True)
    assert fast.numpy_step.compiled and fast.numpy_step.kernel_rows == 8  # won at every batch tried
    tokens, positions = torch.tensor([[3], [5], [7]]), torch.tensor([[4], [0], [6]])
    caches = [new_cache(tiny, 3, 8), new_cache(tiny, 3, 8)]
    with torch.inference_mode():
        for cache in caches:  # each row's earlier positions, the same in both caches
            cache.k.normal_(generator=torch.Generator().manual_seed(1))
            cache.v.normal_(generator=torch.Generator().manual_seed(2))
        plain = tiny(tokens, positions, caches[0])
        fused = fast(tokens, positions, caches[1])
    assert torch.allclose(fused, plain, atol=1e-5) and torch.allclose(caches[0].k, caches[1].k, atol=1e-5)


@needs_numba
def test_the_kernel_takes_batches_up_to_the_first_it_lost(tiny, monkeypatch):
    def time_in_step(step, put_in_step, options, cache):
        if set(options) == {"compiled", "library"}:  # a batch of options["compiled"] rows: the kernel wins at 2
            return {"compiled": 1e-3 if options["compiled"] == 2 else 3e-3, "library": 2e-3}
        return {name: 2e-3 if name == "BLAS" else 1e-3 if name == "compiled" else 2e-3 for name in options}

    monkeypatch.setattr(tuning, "time_in_step", time_in_step)
    fast = fuse(tiny, pack=True)
    assert fast.numpy_step.compiled and fast.numpy_step.kernel_rows == 2
    assert "kernel's most rows" in tuning.report() and "4 rows, compiled 3.00 ms" in tuning.report()
    assert "8 rows" not in tuning.report()  # not tried after the kernel lost at 4


def test_the_banner_says_where_the_decode_products_run(tiny, monkeypatch):
    from llmperf.serve.config import resolve

    monkeypatch.setattr(tuning, "time_in_step", faster("BLAS", []))
    fast = fuse(tiny, pack=True)
    assert resolve(fast, max_model_len=64).decode_products.startswith("NumPy's BLAS at 1 row (")
    fast.numpy_step.adaptive = ThreadCount(2, 1)
    assert "at 1 row (2 threads, 1 while that measures faster), then " in fast.products_said()
    fast.numpy_step.adaptive = ThreadCount(1, 1)
    assert "at 1 row (1 thread), then " in fast.products_said()
    fast.numpy_step.compiled, fast.numpy_step.kernel_rows, fast.numpy_step.fewest_rows = True, 4, 3
    said = fast.products_said()
    assert said.startswith("compiled (Numba, ") and "up to 4 rows, then " in said and "zero rows" not in said
    fast.numpy_step.kernel_rows = 0
    assert "at 1 row, then " in fast.products_said() and "fewer than 3 rows given zero rows up to 3" \
        in fast.products_said()
    assert "its decode products compiled" in resolve(fast, max_model_len=64).banner()
    assert resolve(tiny, max_model_len=64).decode_products == "PyTorch's"


def test_without_numba_a_compiled_matrix_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setattr(kernel, "_compiled", lambda: "Numba is not installed (pip install numba); ...")
    with pytest.raises(RuntimeError, match="Numba is not installed"):
        kernel.CompiledMatrix(np.ones((2, 2), np.float32))

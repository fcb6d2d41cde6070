"""The compiled step (llmperf.fast.compiled_step) gives the NumPy step's logits within float32 rounding and writes the
same keys and values, in a contiguous cache and in a paged one whose blocks are in order or not; SmolLM2 makes the
same tokens with it as the plain model; a stopwatch still splits the NumPy code; and where the step cannot compile,
the NumPy code runs with the compiled products."""

import numpy as np
import pytest
import torch

from llmperf import generate
from llmperf.fast import compiled_step, tuning
from llmperf.fast.fused import FusedTransformer
from llmperf.fast.numpy_step import MATRICES
from llmperf.generation import new_cache
from llmperf.paged_cache import PagedKVCache

needs_step = pytest.mark.skipif(compiled_step.why_not() is not None, reason=str(compiled_step.why_not()))


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMPERF_CACHE_DIR", str(tmp_path))


def on_the_kernel(model):
    """`model` fused with every product in the compiled kernel, measured or not."""
    return FusedTransformer(model, dict.fromkeys(MATRICES, tuning.COMPILED))


def caches(tiny, kind):
    """Two like caches of one sequence, 20 positions, random keys and values in them already."""
    made = []
    for _ in range(2):
        if kind == "contiguous":
            cache = new_cache(tiny, 1, 20)
        else:  # paged, 4 positions a block; the table in order, or not (a prompt found in the prefix cache)
            pool = PagedKVCache(tiny.cfg, num_blocks=6, block_size=4)
            cache = pool.view([[1, 2, 3, 4, 5]] if kind == "paged, in order" else [[4, 0, 5, 2, 1]], 20)
        owner = cache if kind == "contiguous" else cache.cache
        owner.k.normal_(generator=torch.Generator().manual_seed(1))
        owner.v.normal_(generator=torch.Generator().manual_seed(2))
        made.append(cache)
    return made


@needs_step
@pytest.mark.parametrize("kind, at_once", [("contiguous", 4), ("contiguous", 1), ("paged, in order", 4),
                                            ("paged, shuffled", 1)])
def test_the_compiled_step_gives_the_numpy_codes_logits_and_writes_the_same_cache(tiny, kind, at_once):
    step = on_the_kernel(tiny).numpy_step
    step.at_once = at_once  # the kernel's rows per pass: both ways, the same sums
    compiled, numpy = caches(tiny, kind)
    for pos in (0, 3, 4, 11, 19):  # a block's first and last positions, and the last one there is
        token = (7 * pos + 5) % tiny.cfg.vocab_size
        got, want = step(token, pos, compiled), step.numpy_code(token, pos, numpy)
        assert got.shape == want.shape == (tiny.cfg.vocab_size,) and got.dtype == np.float32
        assert np.allclose(got, want, atol=1e-5), f"position {pos}: {np.abs(got - want).max()}"
    owners = (compiled, numpy) if kind == "contiguous" else (compiled.cache, numpy.cache)
    assert torch.allclose(owners[0].k, owners[1].k, atol=1e-5) and torch.allclose(owners[0].v, owners[1].v, atol=1e-5)


@needs_step
def test_smollm2_makes_the_plain_models_tokens_with_the_compiled_step(smollm2):
    model, tok = smollm2
    fast = on_the_kernel(model)
    prompt = tok.encode_chat("Name three planets.")
    assert generate(fast, prompt, 24).tolist() == generate(model, prompt, 24).tolist()


@needs_step
def test_a_stopwatch_splits_the_numpy_code_not_the_compiled_step(tiny, monkeypatch):
    step, kinds = on_the_kernel(tiny).numpy_step, []
    monkeypatch.setattr(compiled_step, "decode", lambda *a: pytest.fail("the stopwatch cannot split the compiled step"))
    step(3, 0, new_cache(tiny, 1, 4), lap=kinds.append)
    assert "attention" in kinds and kinds[-1] == "lm_head"


def test_where_the_step_cannot_compile_the_numpy_code_runs_with_the_compiled_products(tiny, monkeypatch):
    from llmperf.fast import kernel

    if kernel.why_not() is not None:
        pytest.skip(kernel.why_not())
    monkeypatch.setattr(compiled_step, "why_not", lambda: "Numba could not compile the step here (a test).")
    monkeypatch.setattr(compiled_step, "decode", lambda *a: pytest.fail("the compiled step ran"))
    step = on_the_kernel(tiny).numpy_step
    cache = new_cache(tiny, 1, 4)
    assert step.compiled and step(3, 0, cache).shape == (tiny.cfg.vocab_size,)

"""The fast decode path computes the same function as the plain model, with its weights laid out for NumPy."""

import copy

import numpy as np
import pytest
import torch

from llmperf import generate
from llmperf.fast import blas, fuse
from llmperf.generation import new_cache
from llmperf.kv_cache import CacheOverflowError
from tests.test_model import cached_logits


@pytest.mark.parametrize("rows, cols, threads, want", [
    (576, 576, 2, 800),     # SmolLM2's wo: 331,776 elements, one thread; 800 rows reach 460,800
    (576, 768, 2, 600),     # 442,368: just under the line; 600 rows of 768 reach it
    (960, 576, 2, 960),     # 552,960: OpenBLAS already splits it
    (576, 576, 1, 576),     # one thread: nothing to gain
    (64, 64, 2, 64),        # 7,200 rows would be 112 times the bytes: not worth it
])
def test_threaded_gemv_rows(rows, cols, threads, want, monkeypatch):
    from llmperf.fast import blas as fast

    monkeypatch.setattr(fast, "numpy_uses_openblas", lambda: True)
    assert fast.threaded_gemv_rows(rows, cols, threads) == want
    if want > rows:
        assert want * cols >= fast.OPENBLAS_ONE_THREAD_BELOW > (want - 1) * cols  # the fewest rows that do
    monkeypatch.setattr(fast, "numpy_uses_openblas", lambda: False)
    assert fast.threaded_gemv_rows(rows, cols, threads) == rows  # another BLAS: its own rules, left alone


def test_which_passes_run_in_numpy(tiny):
    fast, cache = fuse(tiny), new_cache(tiny, 2, 8)
    one, two, pos = torch.zeros(1, 1, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long), torch.tensor([0])
    with torch.inference_mode():
        assert fast.runs_in_numpy(one, pos, cache)
        assert fast.runs_in_numpy(two, pos, cache)  # a batch's step: NumPy's matrix products
        assert fast.runs_in_numpy(two, torch.tensor([[0], [3]]), cache)  # each sequence at its own position
        assert not fast.runs_in_numpy(two, torch.tensor([0, 1, 2]), cache)  # positions that fit no row
        assert not fast.runs_in_numpy(torch.zeros(1, 4, dtype=torch.long), torch.arange(4), cache)  # a prompt
        assert not fast.runs_in_numpy(one, None, None)  # no cache: a one-token model call, PyTorch's
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not fast.runs_in_numpy(one, pos, cache)  # NumPy would ignore autocast
    assert not fast.runs_in_numpy(one, pos, cache)  # autograd on: NumPy would drop the gradient
    assert fuse(copy.deepcopy(tiny).to(torch.bfloat16)).numpy_step is None  # NumPy has no bfloat16


@pytest.mark.parametrize("batch", [1, 2])
def test_fused_tiny_matches_plain(tiny, batch):
    fast = fuse(tiny)
    tokens = torch.randint(0, tiny.cfg.vocab_size, (batch, 16), generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        assert torch.allclose(fast(tokens), tiny(tokens), atol=1e-5)
    assert torch.allclose(cached_logits(fast, tokens, 6), cached_logits(tiny, tokens, 6), atol=1e-5)


def test_a_step_past_the_cache_is_refused_before_numpy_writes(tiny):
    fast, cache = fuse(tiny), new_cache(tiny, 1, 4)
    before = cache.k.clone()
    with torch.inference_mode(), pytest.raises(CacheOverflowError, match="capacity 4"):
        fast(torch.zeros(1, 1, dtype=torch.long), torch.tensor([4]), cache)  # position 4 of a 4-token cache
    assert torch.equal(cache.k, before)


def test_fused_model_keeps_gradients_flowing(tiny):
    fast = fuse(tiny)
    x = torch.randn(1, 1, tiny.cfg.d_model, requires_grad=True)
    fast.layers[0].attention.wo(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_fused_smollm2_same_logits_and_tokens(smollm2):
    model, tok = smollm2
    fast = fuse(model)
    tokens = torch.tensor([tok.encode("Water boils at one hundred degrees Celsius at sea level, but")])
    with torch.inference_mode():
        assert (fast(tokens) - model(tokens)).abs().max().item() < 1e-3
    prompt = tok.encode_chat("Name three planets.")
    assert generate(fast, prompt, 32).tolist() == generate(model, prompt, 32).tolist()


@pytest.mark.parametrize("static", [False, True])
def test_a_cached_one_token_step_runs_in_numpy(tiny, static, monkeypatch):
    """A cached float32 CPU step of one sequence is NumpyDecodeStep's, writes the same keys and values into
    the cache as the plain model, and gives its logits; with a static cache too (which reads every slot)."""
    from llmperf.fast import NumpyDecodeStep

    fast, calls = fuse(tiny), []
    step = NumpyDecodeStep.__call__
    monkeypatch.setattr(NumpyDecodeStep, "__call__", lambda self, *a, **k: calls.append(a[:2]) or step(self, *a, **k))
    tokens = torch.randint(0, tiny.cfg.vocab_size, (1, 9), generator=torch.Generator().manual_seed(3))
    caches = {m: new_cache(tiny, 1, 12, static=static) for m in ("plain", "fast")}
    with torch.inference_mode():
        for name, m in (("plain", tiny), ("fast", fast)):
            m(tokens[:, :6], torch.arange(6), caches[name])  # the prompt: PyTorch, in both
        for pos in range(6, 9):
            want = tiny(tokens[:, pos:pos + 1], torch.tensor([pos]), caches["plain"])
            got = fast(tokens[:, pos:pos + 1], torch.tensor([pos]), caches["fast"])
            assert got.shape == want.shape == (1, 1, tiny.cfg.vocab_size)
            assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    assert calls == [(int(tokens[0, p]), p) for p in range(6, 9)]
    assert torch.allclose(caches["fast"].k, caches["plain"].k, atol=1e-6)
    assert torch.allclose(caches["fast"].v, caches["plain"].v, atol=1e-6)


@pytest.mark.parametrize("static", [False, True])
def test_a_batched_step_runs_in_numpy_each_sequence_at_its_own_position(tiny, static, monkeypatch):
    """A decode step of three sequences at positions 5, 8 and 2 is NumpyDecodeStep.batch's (one matrix product
    per weight for all three), writes the same keys and values as the plain model, and gives its logits."""
    from llmperf.fast import NumpyDecodeStep

    fast, calls = fuse(tiny), []
    batch = NumpyDecodeStep.batch
    monkeypatch.setattr(NumpyDecodeStep, "batch", lambda self, *a, **k: calls.append(a[:2]) or batch(self, *a, **k))
    lengths = [5, 8, 2]
    caches = {m: new_cache(tiny, 3, 16, static=static) for m in ("plain", "fast")}
    prompts = torch.randint(1, tiny.cfg.vocab_size, (3, 8), generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        for name, m in (("plain", tiny), ("fast", fast)):
            for b, n in enumerate(lengths):  # each prompt on its own, into its row of the cache
                alone = new_cache(tiny, 1, n)
                m(prompts[b:b + 1, :n], torch.arange(n), alone)
                caches[name].load(b, alone, n)
        positions = torch.tensor(lengths)[:, None]  # (3, 1)
        for step in range(3):
            tokens = prompts[:, step:step + 1]  # (3, 1): any ids will do
            want = tiny(tokens, positions + step, caches["plain"])
            got = fast(tokens, positions + step, caches["fast"])
            assert got.shape == want.shape == (3, 1, tiny.cfg.vocab_size)
            assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    assert [c[1] for c in calls] == [[n + step for n in lengths] for step in range(3)]
    assert torch.allclose(caches["fast"].k, caches["plain"].k, atol=1e-6)
    assert torch.allclose(caches["fast"].v, caches["plain"].v, atol=1e-6)


def pin(monkeypatch, **layouts):
    """Fix the host-dependent layouts (`choices.measured_layouts`) instead of measuring them: a kind of matrix
    named in `layouts` (wqkv, wo, w13, w2, head) is stored so, every other output-major, and the step's products
    run in the BLAS (`choices.measured_kernel`)."""
    from llmperf.fast import choices

    every = dict.fromkeys(("wqkv", "wo", "w13", "w2", "head"), "output-major")
    monkeypatch.setattr(choices, "measured_layouts", lambda model, build_step: {**every, **layouts})
    monkeypatch.setattr(choices, "measured_kernel", lambda model, build_step, layouts: "BLAS")


def test_fuse_shares_what_it_does_not_fuse(tiny, monkeypatch):
    pin(monkeypatch, head="input-major")
    fast = fuse(tiny)
    assert fast.tok_embeddings is tiny.tok_embeddings and fast.norm is tiny.norm
    assert fast.layers[0].attention_norm is tiny.layers[0].attention_norm
    assert fast.layers[0].feed_forward.w2.weight is tiny.layers[0].feed_forward.w2.weight
    assert fast.layers[0].attention.wo.weight is tiny.layers[0].attention.wo.weight  # stored as it is
    assert fast.rope_cos.data_ptr() == tiny.rope_cos.data_ptr()
    # float32 on a CPU, input-major chosen: the LM head is a copy, stored (in, out), read by PyTorch as a view
    head = fast.output.weight
    assert torch.equal(head, tiny.output.weight) and head.t().is_contiguous()
    assert head.data_ptr() != tiny.output.weight.data_ptr()
    half = copy.deepcopy(tiny).to(torch.bfloat16)  # no NumPy step: the head is shared, as it is
    assert fuse(half).output.weight is half.output.weight


@pytest.mark.parametrize("threads", [1, 2])
def test_smollm2_wo_is_padded_for_two_threads(smollm2, threads, monkeypatch):
    """SmolLM2's wo (576 × 576) is below OpenBLAS's line for two threads: padded (where this host's
    measurement chose it), it gets zero rows, and PyTorch reads the same weights through a view."""
    import llmperf.fast as fast_module
    from llmperf.fast import blas

    model, _ = smollm2
    monkeypatch.setattr(blas, "numpy_uses_openblas", lambda: True)
    monkeypatch.setattr(blas, "openblas_threads", lambda: threads)
    layout = "output-major, padded" if threads > 1 else "output-major"  # as a measurement would choose
    attn = fast_module.FusedAttention(model.layers[0].attention, {"wo": layout})
    wo = model.layers[0].attention.wo.weight
    if threads == 1:
        assert attn.wo_padded is None and attn.wo.weight is wo
    else:
        assert attn.wo_padded.shape == (800, 576) and not attn.wo_padded[576:].any()
        assert torch.equal(attn.wo.weight, wo) and attn.wo.weight.data_ptr() == attn.wo_padded.data_ptr()


def test_available_threads_follows_openblas_environment_variables(monkeypatch):
    from llmperf.fast import available_threads

    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    assert available_threads() >= 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert available_threads() == 3
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")  # OpenBLAS's own variable wins
    assert available_threads() == 1


@pytest.mark.skipif(not blas.can_limit_threads(), reason="NumPy's BLAS here is not an OpenBLAS threadpoolctl can "
                    "steer, so the thread count of its products cannot be set")
def test_limit_threads_sets_what_openblas_runs_on():
    before = blas.openblas_threads()
    try:
        blas.limit_threads(1)
        assert blas.openblas_threads() == 1
        x = np.arange(12, dtype=np.float32)
        assert np.array_equal(np.ones((3, 12), np.float32) @ x, np.full(3, x.sum()))  # still computes
    finally:
        blas.limit_threads(before)
    assert blas.openblas_threads() == before


def test_fused_model_refuses_to_be_moved(tiny):
    fast = fuse(tiny)
    with pytest.raises(RuntimeError, match="Move or cast that model first, then fuse it"):
        fast.to(torch.bfloat16)
    assert tiny.dtype == torch.float32  # the shared tensors were left alone



@pytest.mark.parametrize("preset, want", [(None, "18"), ("24", "24")])
def test_importing_llmperf_shortens_openblas_spinning_unless_told_otherwise(preset, want):
    """OpenBLAS's threads spin for a tenth of a second after a product by default, slowing the PyTorch work
    after it; llmperf sets OPENBLAS_THREAD_TIMEOUT before NumPy loads OpenBLAS, and keeps a reader's own value."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if preset:
        env["OPENBLAS_THREAD_TIMEOUT"] = preset
    code = "import llmperf, numpy, os; print(os.environ['OPENBLAS_THREAD_TIMEOUT'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == want, out.stderr

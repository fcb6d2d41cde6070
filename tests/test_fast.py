"""The fast decode path computes the same function as the plain model, and keeps its thread pools apart."""

import pytest
import torch

from llmperf import generate
from llmperf.fast import DecodeLinear, fuse, numpy_gemv, qualifies_for_numpy_gemv
from llmperf.generation import new_cache
from llmperf.kv_cache import CacheOverflowError
from tests.test_model import cached_logits


@pytest.fixture
def two_threads():
    """Run the test with PyTorch on two threads, so that a switch to one is visible; restore afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield 2
    torch.set_num_threads(before)


@pytest.mark.parametrize("shape", [(1, 1, 5), (2, 3, 5), (1, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("in_numpy_gemv", [False, True])
def test_decode_linear_equals_linear(shape, dtype, in_numpy_gemv, monkeypatch):
    w = torch.randn(12, 5, generator=torch.Generator().manual_seed(0)).to(dtype)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    numpy_calls = []
    from_numpy = torch.from_numpy
    monkeypatch.setattr(torch, "from_numpy", lambda a: numpy_calls.append(a.shape) or from_numpy(a))
    with torch.inference_mode():
        if in_numpy_gemv:
            with numpy_gemv():
                y = DecodeLinear(w)(x)
        else:
            y = DecodeLinear(w)(x)
    assert y.shape == (*shape[:-1], 12) and y.dtype == dtype
    assert torch.allclose(y.float(), (x @ w.t()).float(), atol=1e-6 if dtype == torch.float32 else 1e-2)
    one_float32_row = x.numel() == x.shape[-1] and dtype == torch.float32
    assert numpy_calls == ([(12,)] if in_numpy_gemv and one_float32_row else [])  # NumPy: one row, when asked


def test_which_steps_qualify_for_numpy_gemv(tiny):
    one, two = torch.zeros(1, 1, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long)
    with torch.inference_mode():
        assert qualifies_for_numpy_gemv(one, tiny)
        assert not qualifies_for_numpy_gemv(two, tiny)  # a batch (or a prompt): PyTorch's matmul
        assert not qualifies_for_numpy_gemv(torch.zeros(1, 4, dtype=torch.long), tiny)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not qualifies_for_numpy_gemv(one, tiny)  # NumPy would ignore autocast
    assert not qualifies_for_numpy_gemv(one, tiny)  # autograd on: NumPy would drop the gradient


@pytest.mark.parametrize("batch", [1, 2])
def test_fused_tiny_matches_plain(tiny, batch):
    fast = fuse(tiny)
    tokens = torch.randint(0, tiny.cfg.vocab_size, (batch, 16), generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        assert torch.allclose(fast(tokens), tiny(tokens), atol=1e-5)
    assert torch.allclose(cached_logits(fast, tokens, 6), cached_logits(tiny, tokens, 6), atol=1e-5)


def test_one_token_step_runs_torch_on_one_thread(tiny, two_threads):
    """During a float32 CPU decode step PyTorch uses one thread (BLAS has the cores); prompts keep all of them."""
    fast, seen = fuse(tiny), []
    fast.layers[0].register_forward_hook(lambda *_: seen.append(torch.get_num_threads()))
    with torch.inference_mode():
        fast(torch.zeros(1, 4, dtype=torch.long))  # a prompt
        fast(torch.zeros(1, 1, dtype=torch.long))  # one token, no cache: still a one-row step
    assert seen == [two_threads, 1]
    assert torch.get_num_threads() == two_threads  # restored afterwards


def test_thread_count_is_restored_when_a_step_fails(tiny, two_threads):
    fast, cache = fuse(tiny), new_cache(tiny, 1, 4)
    with torch.inference_mode(), pytest.raises(CacheOverflowError):
        fast(torch.zeros(1, 1, dtype=torch.long), torch.tensor([4]), cache)  # position 4 of a 4-token cache
    assert torch.get_num_threads() == two_threads


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
    monkeypatch.setattr(NumpyDecodeStep, "__call__", lambda self, *a: calls.append(a[:2]) or step(self, *a))
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


def test_fuse_shares_what_it_does_not_fuse(tiny):
    fast = fuse(tiny)
    assert fast.tok_embeddings is tiny.tok_embeddings and fast.norm is tiny.norm
    assert fast.layers[0].attention_norm is tiny.layers[0].attention_norm
    assert fast.layers[0].attention.wo.weight is tiny.layers[0].attention.wo.weight
    assert fast.output.weight is tiny.output.weight
    assert fast.rope_cos.data_ptr() == tiny.rope_cos.data_ptr()


def test_fused_model_refuses_to_be_moved(tiny):
    fast = fuse(tiny)
    with pytest.raises(RuntimeError, match="Move or cast that model first, then fuse it"):
        fast.to(torch.bfloat16)
    assert tiny.dtype == torch.float32  # the shared tensors were left alone


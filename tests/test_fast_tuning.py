"""The fused model's host-dependent layouts (llmperf.fast.tuning) are decided by a measurement on this host,
kept per host, and the model computes the same function whichever is chosen."""

import pytest
import torch

from llmperf.fast import fuse, tuning
from llmperf.generation import new_cache
from tests.test_model import cached_logits


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMPERF_CACHE_DIR", str(tmp_path))


def faster(way: str, calls: list):
    """A stand-in for `tuning.measure` that times `way` at 1 µs and every other at 2 µs, and counts its calls."""
    def measure(rows, cols, ways):
        calls.append((rows, cols))
        return {w: 1e-6 if w == way else 2e-6 for w in ways}

    return measure


def test_the_choice_follows_the_measurement_and_is_kept_per_host(monkeypatch):
    calls = []
    monkeypatch.setattr(tuning, "measure", faster("input-major", calls))
    assert tuning.choose("wqkv", 960, 576) == "input-major" and len(calls) == 1
    monkeypatch.setattr(tuning, "measure", faster("output-major", calls))
    assert tuning.choose("wqkv", 960, 576) == "input-major" and len(calls) == 1  # kept: not measured again
    monkeypatch.setattr(tuning, "host_key", lambda: "another processor | another BLAS | 2 threads")
    assert tuning.choose("wqkv", 960, 576) == "output-major" and len(calls) == 2  # another host: measured
    assert "wqkv 960x576: output-major (input-major 2 µs, output-major 1 µs)" in tuning.report()


def test_the_fused_model_follows_the_choice_and_computes_the_same(tiny, monkeypatch):
    tokens = torch.randint(0, tiny.cfg.vocab_size, (1, 12), generator=torch.Generator().manual_seed(7))
    want = cached_logits(tiny, tokens, 4)
    for way in ("input-major", "output-major"):
        monkeypatch.setenv("LLMPERF_CACHE_DIR", f"{tuning.cache_file().parent}-{way}")
        monkeypatch.setattr(tuning, "measure", faster(way, []))
        fast = fuse(tiny)
        wqkv = fast.layers[0].attention.wqkv.weight  # (out, in) as PyTorch reads it
        assert wqkv.t().is_contiguous() if way == "input-major" else wqkv.is_contiguous()
        w2 = fast.layers[0].feed_forward.w2.weight
        assert (w2 is tiny.layers[0].feed_forward.w2.weight) == (way == "output-major")  # a copy only if moved
        assert torch.allclose(cached_logits(fast, tokens, 4), want, atol=1e-5)


def test_padding_is_a_candidate_only_where_it_lifts_a_matrix_over_the_line(monkeypatch):
    from llmperf.fast import blas

    monkeypatch.setattr(blas, "numpy_uses_openblas", lambda: True)
    monkeypatch.setattr(blas, "openblas_threads", lambda: 2)
    assert tuning.candidates(576, 576, paddable=True) == list(tuning.WAYS)
    assert tuning.candidates(576, 576, paddable=False) == list(tuning.WAYS[:2])
    assert tuning.candidates(960, 576, paddable=True) == list(tuning.WAYS[:2])  # already split
    times = tuning.measure(576, 576, list(tuning.WAYS))  # the real measurement: a time for every way
    assert set(times) == set(tuning.WAYS) and all(t > 0 for t in times.values())


def test_a_cache_that_cannot_be_read_is_measured_again(monkeypatch):
    calls = []
    tuning.cache_file().parent.mkdir(parents=True, exist_ok=True)
    tuning.cache_file().write_text("{not json")
    monkeypatch.setattr(tuning, "measure", faster("output-major", calls))
    assert tuning.choose("head", 100, 64) == "output-major" and len(calls) == 1
    assert tuning.timings()["head 100x64"]["chosen"] == "output-major"


def test_the_host_key_names_what_a_choice_depends_on(monkeypatch):
    from llmperf.fast import blas

    key = tuning.host_key()
    assert blas.numpy_blas() in key and f"{blas.openblas_threads()} threads" in key
    monkeypatch.setattr(blas, "openblas_threads", lambda: 7)
    assert tuning.host_key() != key and "7 threads" in tuning.host_key()
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")  # OpenBLAS made to use AVX2 kernels: measured apart
    assert "(Haswell kernels)" in tuning.host_key()


def test_a_batched_step_matches_whichever_way_is_chosen(tiny, monkeypatch):
    for way in ("input-major", "output-major"):
        monkeypatch.setenv("LLMPERF_CACHE_DIR", f"{tuning.cache_file().parent}-b-{way}")
        monkeypatch.setattr(tuning, "measure", faster(way, []))
        fast = fuse(tiny)
        caches = [new_cache(tiny, 2, 8), new_cache(tiny, 2, 8)]
        tokens = torch.tensor([[3], [5]])
        with torch.inference_mode():
            want = tiny(tokens, torch.tensor([[0], [0]]), caches[0])
            got = fast(tokens, torch.tensor([[0], [0]]), caches[1])
        assert torch.allclose(got, want, atol=1e-5)

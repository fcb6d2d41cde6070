"""The fused model's host-dependent layouts (llmperf.fast.tuning) are decided by a measurement in the step on
this host, kept per host, and the model computes the same function whichever is chosen."""

import pytest
import torch

from llmperf.fast import blas, fuse, kernel, numpy_step, packing, tuning
from llmperf.fast.choices import matrices
from llmperf.generation import new_cache
from tests.test_model import cached_logits


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMPERF_CACHE_DIR", str(tmp_path))  # (conftest restores OpenBLAS's threads after each test)


def faster(winner: str, calls: list):
    """A stand-in for `tuning.time_in_step` that times the option named `winner` at 1 ms a step and every other at
    2 ms, putting none of them in the step, and counts its calls. Thread counts (`choices.measured_threads`) are
    counted only if `winner` names one; otherwise every thread OpenBLAS starts is fastest, as a real measurement
    finds on most hosts. So is the kernel's measurement (`choices.measured_kernel`): unless `winner` is "BLAS" or
    "compiled", the BLAS wins, so that the layouts chosen stay the step's; and the kernel's default rows at once win
    (`choices.measured_at_once`) unless `winner` names rows ("1 row")."""
    def time_in_step(step, put_in_step, options, cache):
        if "thread" in next(iter(options)) and "thread" not in winner:
            return {w: 1e-3 if w == tuning.threads_name(blas.available_threads()) else 2e-3 for w in options}
        if "row" in next(iter(options)) and "row" not in winner:  # the kernel's rows at once: its default wins
            return {w: 1e-3 if w == tuning.rows_name(kernel.AT_ONCE[0]) else 2e-3 for w in options}
        if "BLAS" in options and winner not in options:
            return {w: 1e-3 if w == "BLAS" else 2e-3 for w in options}
        calls.append(sorted(options))
        return {w: 1e-3 if w == winner else 2e-3 for w in options}

    return time_in_step


def test_the_choice_follows_the_measurement_and_is_kept_per_host(tiny, monkeypatch):
    calls = []
    monkeypatch.setattr(tuning, "time_in_step", faster("input-major", calls))
    fast = fuse(tiny)
    assert len(calls) == 5  # one measurement per kind of matrix: wqkv, wo, w13, w2, head
    assert fast.layers[0].attention.wqkv.weight.t().is_contiguous()  # input-major, as measured
    monkeypatch.setattr(tuning, "time_in_step", faster("output-major", calls))
    assert fuse(tiny).layers[0].attention.wqkv.weight.t().is_contiguous() and len(calls) == 5  # kept
    monkeypatch.setattr(tuning, "host_key", lambda threads=None: "another processor | another BLAS | 2 threads")
    assert fuse(tiny).layers[0].attention.wqkv.weight.is_contiguous() and len(calls) == 10  # measured again
    assert "wqkv 128x64: output-major (step: input-major 2.00 ms, output-major 1.00 ms)" in tuning.report()


def test_the_fused_model_follows_the_choice_and_computes_the_same(tiny, monkeypatch):
    tokens = torch.randint(0, tiny.cfg.vocab_size, (1, 12), generator=torch.Generator().manual_seed(7))
    want = cached_logits(tiny, tokens, 4)
    for layout in ("input-major", "output-major"):
        monkeypatch.setenv("LLMPERF_CACHE_DIR", f"{tuning.cache_file().parent}-{layout}")
        monkeypatch.setattr(tuning, "time_in_step", faster(layout, []))
        fast = fuse(tiny)
        w2 = fast.layers[0].feed_forward.w2.weight
        assert (w2 is tiny.layers[0].feed_forward.w2.weight) == (layout == "output-major")  # a copy only if moved
        assert torch.allclose(cached_logits(fast, tokens, 4), want, atol=1e-5)
        caches = [new_cache(tiny, 2, 8), new_cache(tiny, 2, 8)]  # and a batch's step
        with torch.inference_mode():
            plain = tiny(torch.tensor([[3], [5]]), torch.tensor([[0], [0]]), caches[0])
            fused = fast(torch.tensor([[3], [5]]), torch.tensor([[0], [0]]), caches[1])
        assert torch.allclose(fused, plain, atol=1e-5)


def test_a_real_measurement_in_the_step_chooses_among_the_candidates(tiny):
    fuse(tiny)
    chosen = tuning.saved_layouts(matrices(tiny))
    assert set(chosen) == {"wqkv", "wo", "w13", "w2", "head"} and set(chosen.values()) <= set(tuning.LAYOUTS)
    for seen in tuning.timings().values():
        chosen = tuning.threads_name(seen["chosen"]) if isinstance(seen["chosen"], int) else seen["chosen"]
        assert chosen == min(seen["step seconds"], key=seen["step seconds"].get)
    assert "measured in the step here" in tuning.report()


def test_padding_is_a_candidate_only_where_it_lifts_a_matrix_over_the_line(monkeypatch):
    monkeypatch.setattr(blas, "numpy_uses_openblas", lambda: True)
    monkeypatch.setattr(blas, "openblas_threads", lambda: 2)
    assert tuning.candidates(576, 576, paddable=True) == list(tuning.LAYOUTS)
    assert tuning.candidates(576, 576, paddable=False) == list(tuning.LAYOUTS[:2])
    assert tuning.candidates(960, 576, paddable=True) == list(tuning.LAYOUTS[:2])  # already split
    assert tuning.first_guess(576, 576, True) == "output-major, padded"
    assert tuning.first_guess(3072, 576, False) == "input-major"


def test_a_cache_that_cannot_be_read_is_measured_again(tiny, monkeypatch):
    calls = []
    tuning.cache_file().parent.mkdir(parents=True, exist_ok=True)
    tuning.cache_file().write_text("{not json")
    monkeypatch.setattr(tuning, "time_in_step", faster("output-major", calls))
    fuse(tiny)
    assert len(calls) == 5 and tuning.saved_layouts(matrices(tiny))["head"] == "output-major"


def test_the_host_key_names_what_a_choice_depends_on(monkeypatch):
    key = tuning.host_key()
    assert blas.numpy_blas() in key and f"{blas.openblas_threads()} threads" in key
    monkeypatch.setattr(blas, "openblas_threads", lambda: 7)
    assert tuning.host_key() != key and "7 threads" in tuning.host_key()
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")  # OpenBLAS made to use AVX2 kernels: measured apart
    assert "(Haswell kernels)" in tuning.host_key()


needs_onednn = pytest.mark.skipif(not packing.available(), reason="PyTorch here was built without oneDNN: nothing "
                                  "is packed, and products of several rows are PyTorch's own")


@needs_onednn
def test_packing_follows_the_measurement_and_is_kept_per_host(tiny, monkeypatch):
    calls = []
    monkeypatch.setattr(tuning, "time_in_step", faster("packed", calls))
    fast = fuse(tiny, pack=True)
    assert all(layer.packed is not None for layer in fast.linears()) and ["packed", "plain"] in calls
    assert tuning.saved_choice(tuning.PRODUCTS, matrices(tiny)) == "packed"
    measured = len(calls)
    monkeypatch.setattr(tuning, "time_in_step", faster("plain", calls))
    assert fuse(tiny, pack=True).output.packed is not None and len(calls) == measured  # kept: not measured again
    monkeypatch.setattr(tuning, "host_key", lambda threads=None: "another processor | another BLAS | 2 threads")
    plain = fuse(tiny, pack=True)
    assert all(layer.packed is None for layer in plain.linears()) and len(calls) > measured  # measured again
    assert "several rows: wqkv 128x64" in tuning.report() and ": plain (step: plain 1.00 ms" in tuning.report()
    assert fuse(tiny).output.packed is None  # not asked to pack: nothing packed, nothing measured


@needs_onednn
def test_packed_products_compute_the_same_prefill_and_batch_step(tiny, monkeypatch):
    monkeypatch.setattr(tuning, "time_in_step", faster("packed", []))
    fast = fuse(tiny, pack=True)
    assert fast.output.packed is not None
    tokens = torch.randint(0, tiny.cfg.vocab_size, (1, 12), generator=torch.Generator().manual_seed(3))
    assert torch.allclose(cached_logits(fast, tokens, 4), cached_logits(tiny, tokens, 4), atol=1e-5)
    caches = [new_cache(tiny, 3, 8), new_cache(tiny, 3, 8)]
    with torch.inference_mode():  # a batch's decode step: each product over the 3 rows from the packed weights
        plain = tiny(torch.tensor([[3], [5], [9]]), torch.tensor([[0], [0], [0]]), caches[0])
        fused = fast(torch.tensor([[3], [5], [9]]), torch.tensor([[0], [0], [0]]), caches[1])
    assert torch.allclose(fused, plain, atol=1e-5) and torch.allclose(caches[1].k, caches[0].k, atol=1e-6)
    x = torch.ones(1, tiny.cfg.d_model)
    monkeypatch.setattr(packing, "linear", lambda *a: pytest.fail("the packed copy was read with autograd on"))
    with torch.enable_grad():  # autograd on: PyTorch's own product on the weights, never the packed copy
        assert torch.equal(fast.output(x), x @ fast.output.weight.T)


def test_without_onednn_nothing_is_packed_or_measured(tiny, monkeypatch):
    calls = []
    monkeypatch.setattr(packing, "available", lambda: False)
    monkeypatch.setattr(tuning, "time_in_step", faster("packed", calls))
    assert all(layer.packed is None for layer in fuse(tiny, pack=True).linears()) and calls == [[
        "input-major", "output-major"]] * 5  # the layouts only


@needs_onednn
@pytest.mark.parametrize("rows", [3, 4])
def test_a_batch_steps_products_get_the_fewest_rows_measured_and_the_same_answer(tiny, rows, monkeypatch):
    """Where a two-row step measured fastest with its products given `rows` rows, a batch of two is padded so
    (and kept per host); the zero rows change no logit and no key."""
    calls = []
    monkeypatch.setattr(tuning, "time_in_step", faster(f"{rows} rows", calls))
    fast = fuse(tiny, pack=True)
    assert ["2 rows", "3 rows", "4 rows"] in calls and fast.numpy_step.fewest_rows == rows
    assert tuning.saved_choice(tuning.FEWEST_ROWS, matrices(tiny)) == rows
    assert "fewest rows: wqkv 128x64" in tuning.report()
    given, product = [], numpy_step.product
    monkeypatch.setattr(numpy_step, "product", lambda x, layer: given.append(len(x)) or product(x, layer))
    caches = [new_cache(tiny, 2, 8), new_cache(tiny, 2, 8)]
    with torch.inference_mode():
        plain = tiny(torch.tensor([[3], [5]]), torch.tensor([[0], [1]]), caches[0])
        padded = fast(torch.tensor([[3], [5]]), torch.tensor([[0], [1]]), caches[1])
    assert len(given) == 4 * tiny.cfg.n_layers + 1 and set(given) == {rows}  # every product was given `rows` rows
    assert torch.allclose(padded, plain, atol=1e-5) and torch.allclose(caches[1].k, caches[0].k, atol=1e-6)
    monkeypatch.setattr(tuning, "time_in_step", faster("2 rows", calls))
    monkeypatch.setattr(tuning, "host_key", lambda threads=None: "another processor | another BLAS | 2 threads")
    assert fuse(tiny, pack=True).numpy_step.fewest_rows == 1  # two rows measured fastest: no padding


@pytest.mark.parametrize("available, counts", [(1, [1]), (2, [1, 2]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8])])
def test_thread_counts_timed(available, counts):
    assert tuning.thread_counts(available) == counts


needs_openblas = pytest.mark.skipif(not blas.can_limit_threads() or blas.available_threads() < 2, reason=(
    "the thread count is measured where OpenBLAS would start two threads or more and threadpoolctl can set it"))


@needs_openblas
@pytest.mark.parametrize("fastest", [1, 2])
def test_the_thread_count_follows_the_measurement_and_is_kept_per_host(tiny, fastest, monkeypatch):
    """The step's products run on the thread count measured fastest (here a stand-in measurement decides),
    which is kept under the threads OpenBLAS would start; the layouts are measured for that count."""
    calls = []
    monkeypatch.setattr(tuning, "time_in_step", faster(tuning.threads_name(fastest), calls))
    fuse(tiny)
    assert calls[0] == sorted(tuning.threads_name(n) for n in tuning.thread_counts(blas.available_threads()))
    assert blas.openblas_threads() == fastest
    assert tuning.saved_choice(tuning.THREADS, matrices(tiny), threads=blas.available_threads()) == fastest
    assert f"{fastest} threads" in tuning.host_key() and tuning.saved_layouts(matrices(tiny)) is not None
    assert "threads: wqkv 128x64" in tuning.report()
    blas.limit_threads(blas.available_threads())
    measured = len(calls)
    monkeypatch.setattr(tuning, "time_in_step", faster(tuning.threads_name(3 - fastest), calls))
    fast = fuse(tiny)
    assert blas.openblas_threads() == fastest and len(calls) == measured  # kept: not measured again
    blas.limit_threads(3 - fastest)  # as another model's choice would
    fast.numpy_step(1, 0, new_cache(tiny, 1, 4))
    assert blas.openblas_threads() == fastest  # each step runs on its model's count
    blas.limit_threads(3 - fastest)
    fast.numpy_step.batch([1, 2], [0, 0], new_cache(tiny, 2, 4))
    assert blas.openblas_threads() == fastest  # a batch's step too


@needs_openblas
def test_a_real_measurement_of_threads_keeps_the_fastest(tiny):
    fuse(tiny)
    seen = tuning.timings()[tuning.choice_key(tuning.THREADS, matrices(tiny))]
    best = min(seen["step seconds"], key=seen["step seconds"].get)
    assert tuning.threads_name(seen["chosen"]) == best and blas.openblas_threads() == seen["chosen"]


def test_the_step_takes_a_matrix_by_its_name(tiny, monkeypatch):
    monkeypatch.setattr(tuning, "time_in_step", faster("output-major", []))
    step = fuse(tiny).numpy_step
    before = list(step.layers)
    arrays = [layer.w13.copy() for layer in before]
    step.set_matrix("w13", arrays)
    assert all(layer.w13 is array and layer.wqkv is old.wqkv and layer.wo is old.wo
               for layer, array, old in zip(step.layers, arrays, before))
    head = step.head.copy()
    step.set_matrix("head", [head])
    assert step.head is head
    with pytest.raises(ValueError, match="No matrix named 'ffn_norm'"):
        step.set_matrix("ffn_norm", arrays)


def held(others: float, winner: str, calls: list):
    """`faster(winner, calls)`, its timings measured while other work held `others` cores (`host.OtherWork`)."""
    timed = faster(winner, calls)
    return lambda *args: tuning.Timed(timed(*args), others)


def test_a_choice_measured_while_other_work_held_a_core_is_used_but_not_saved(tiny, monkeypatch):
    calls = []
    monkeypatch.setattr(tuning, "time_in_step", held(1.0, "input-major", calls))
    assert fuse(tiny).layers[0].attention.wqkv.weight.t().is_contiguous() and len(calls) == 5  # used
    assert "wqkv 128x64" not in tuning._load().get(tuning.host_key(), {})  # not saved
    assert "wqkv 128x64: input-major (step: input-major 1.00 ms, output-major 2.00 ms); not saved: other work " \
           "held 1.00 cores" in tuning.report()
    assert "held up to 1.00 of its cores" in tuning.unsaved_said()
    monkeypatch.setattr(tuning, "time_in_step", held(0.0, "output-major", calls))
    assert fuse(tiny).layers[0].attention.wqkv.weight.t().is_contiguous() and len(calls) == 5  # kept in this process
    monkeypatch.setattr(tuning, "_unsaved", {})  # the next process: measured again, on a quiet host, and saved
    assert fuse(tiny).layers[0].attention.wqkv.weight.is_contiguous() and len(calls) == 10
    assert tuning._load()[tuning.host_key()]["wqkv 128x64"]["chosen"] == "output-major"
    assert tuning.unsaved_said() is None and "not saved" not in tuning.report()


def test_a_little_other_work_does_not_stop_a_choice_being_saved(tiny, monkeypatch):
    monkeypatch.setattr(tuning, "time_in_step", held(tuning.QUIET, "input-major", []))
    fuse(tiny)
    assert tuning._load()[tuning.host_key()]["wqkv 128x64"]["chosen"] == "input-major"


def test_the_kernel_rows_keep_the_busiest_of_their_measurements():
    seconds = tuning.Timed()
    seconds.add(tuning.Timed({"compiled": 1.0, "library": 2.0}, 0.1), "2 rows")
    seconds.add(tuning.Timed({"compiled": 2.0, "library": 1.0}, None), "4 rows")
    assert seconds == {"2 rows, compiled": 1.0, "2 rows, library": 2.0, "4 rows, compiled": 2.0,
                       "4 rows, library": 1.0} and seconds.others == 0.1

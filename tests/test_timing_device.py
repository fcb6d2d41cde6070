"""The timing helper's statistics and the environment report."""

import pytest
import torch

from llmperf import describe, environment, pick_device
from llmperf.timing import Timing, time_calls, time_in_turns


def test_percentiles_interpolate_like_numpy():
    t = Timing((4.0, 1.0, 3.0, 2.0, 5.0))
    assert t.median == 3.0 and t.min == 1.0 and t.mean == 3.0
    assert t.p10 == pytest.approx(1.4) and t.p90 == pytest.approx(4.6)
    assert t.percentile(0) == 1.0 and t.percentile(100) == 5.0


def test_time_calls_counts_calls():
    calls = []
    result = time_calls(lambda: calls.append(1), warmup=3, repeat=7, device="cpu")
    assert len(calls) == 10 and len(result.samples) == 7
    assert all(s >= 0 for s in result.samples)
    with pytest.raises(ValueError, match="repeat >= 1"):
        time_calls(lambda: None, repeat=0, device="cpu")


def test_environment_names_device_dtype_and_versions():
    env = environment("cpu", torch.bfloat16)
    assert env["device"] == "cpu" and env["dtype"] == "bfloat16" and env["torch"] == torch.__version__
    assert env["threads"] == torch.get_num_threads()
    assert "torch threads" in describe("cpu")


def test_pick_device_prefers_cuda_then_mps(monkeypatch):
    monkeypatch.delenv("LLMPERF_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert pick_device().type == "cpu"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert pick_device().type == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device().type == "cuda"
    monkeypatch.setenv("LLMPERF_DEVICE", "cpu")
    assert pick_device().type == "cpu"


def test_unavailable_device_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="sees no CUDA device"):
        pick_device("cuda")


def test_time_in_turns_takes_turns():
    calls = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    result = time_in_turns(fns, rounds=3, device="cpu")
    assert calls == ["a", "b"] + ["a", "b"] * 3  # one warm-up call each, then the rounds
    assert set(result) == {"a", "b"} and all(len(t.samples) == 3 for t in result.values())
    calls.clear()
    time_in_turns(fns, rounds=2, warmup=0, settle=1, device="cpu")
    assert calls == ["a", "a", "b", "b"] * 2  # each timed call right after an untimed one
    with pytest.raises(ValueError, match="rounds >= 1"):
        time_in_turns(fns, rounds=0)


def test_forward_fn_runs_the_requested_shapes(tiny):
    from llmperf.profiling import forward_fn, time_forward

    assert forward_fn(tiny, batch=2, context=5)().shape == (2, tiny.cfg.vocab_size)  # a decode step
    assert forward_fn(tiny, batch=2, new_tokens=3, context=5)().shape == (2, tiny.cfg.vocab_size)
    assert forward_fn(tiny, batch=2, new_tokens=3, context=5, all_logits=True)().shape == (2, 3, tiny.cfg.vocab_size)
    assert len(time_forward(tiny, batch=2, new_tokens=3, context=5, warmup=0, repeat=2).samples) == 2
    with pytest.raises(ValueError, match="Need batch >= 1"):
        forward_fn(tiny, batch=0)


def test_fastest_thread_count_picks_the_faster_and_restores(tiny, monkeypatch):
    from llmperf.chapters import setup as experiments
    from llmperf.timing import Timing

    before = torch.get_num_threads()
    monkeypatch.setattr(experiments, "DEFAULT_THREADS", 2)
    torch.set_num_threads(1)  # as a rerun of a chapter that chose one thread leaves it: 2 is still tried
    try:
        seen = []

        def fake_time_forward(model, context, warmup, repeat):  # one thread "slower" here: 2 wins
            seen.append(torch.get_num_threads())
            return Timing((0.05 if torch.get_num_threads() == 1 else 0.04,))

        monkeypatch.setattr(experiments, "time_forward", fake_time_forward)
        assert experiments.fastest_thread_count(tiny) == 2 and seen == [2, 1]
        assert torch.get_num_threads() == 1  # restored to what it was
        monkeypatch.setattr(experiments, "time_forward", lambda model, context, warmup, repeat: Timing(
            (0.15 if torch.get_num_threads() == 2 else 0.06,)))  # a busy core: one thread wins
        assert experiments.fastest_thread_count(tiny) == 1
    finally:
        torch.set_num_threads(before)

"""A step's thread count follows the machine's load, at batch 1 and per batch size: `fast.threads.ThreadCount` on
made-up step times (each rule, and any sequence of times), and a fused model's steps switching threads give the
same tokens and logits."""

import pytest
from hypothesis import given, settings, strategies as st

from llmperf import generate
from llmperf.fast import blas, fuse
from llmperf.fast.threads import PROBE_EVERY, WINDOW, ThreadCount, other_count

QUIET = {2: 0.028, 1: 0.050}  # seconds a step: two threads beat one
LOADED = {2: 0.072, 1: 0.047}  # another program busy on one core: one thread beats two


def run(counter: ThreadCount, seconds: dict[int, float], steps: int) -> list[int]:
    """Run `steps` steps, each taking `seconds[count it ran on]`; the counts they ran on."""
    ran = []
    for _ in range(steps):
        ran.append(counter.now())
        counter.record(seconds[ran[-1]])
    return ran


def test_a_quiet_machine_runs_the_measured_best_after_one_probe():
    counter = ThreadCount(2, 1)
    ran = run(counter, QUIET, 500)
    assert ran.count(1) == 1 and counter.probes == 1 and counter.switches == 0
    assert counter.now() == 2


def test_a_load_moves_the_step_to_the_faster_count_within_a_window_and_back_when_it_goes():
    counter = ThreadCount(2, 1)
    run(counter, QUIET, 100)
    loaded = run(counter, LOADED, 200)
    moved = loaded.index(1)
    assert moved <= WINDOW, f"a load seen in {moved} steps"
    assert loaded[moved + 1:].count(2) <= len(loaded[moved + 1:]) // PROBE_EVERY + 1, "only probes run on 2"
    quiet = run(counter, QUIET, 100)
    back = next(i for i in range(len(quiet)) if quiet[i:i + 10] == [2] * 10)
    assert back <= PROBE_EVERY + 1, f"the load's end seen in {back} steps"
    assert counter.now() == 2 and counter.switches == 2


def test_a_load_at_the_start_is_found_by_the_first_probe():
    counter = ThreadCount(2, 1)
    ran = run(counter, LOADED, 100)
    assert ran[WINDOW] == 1 and counter.now() == 1 and counter.switches == 1


def test_one_slow_step_moves_nothing():
    counter = ThreadCount(2, 1)
    run(counter, QUIET, 50)
    probes = counter.probes
    counter.record(0.5)  # one step held up by something else
    run(counter, QUIET, 50)
    assert counter.probes == probes and counter.switches == 0


def test_steps_slower_for_both_counts_are_tried_once_then_taken_as_usual():
    """A longer context slows every count alike: the other count is tried, loses, and is not tried again."""
    counter = ThreadCount(2, 1)
    run(counter, QUIET, 50)
    probes = counter.probes
    run(counter, {c: 1.5 * s for c, s in QUIET.items()}, 200)
    assert counter.probes == probes + 1 and counter.switches == 0


def test_a_load_that_comes_back_is_seen_again():
    counter = ThreadCount(2, 1)
    for _ in range(3):
        run(counter, QUIET, 100)
        run(counter, LOADED, 100)
        assert counter.now() == 1
    assert counter.switches == 5


@pytest.mark.parametrize("best, cores, want", [(2, 2, 1), (1, 2, 2), (1, 1, 1), (8, 16, 4), (3, 4, 1)])
def test_the_other_count(best, cores, want):
    assert other_count(best, cores) == want


def test_one_count_never_changes():
    counter = ThreadCount(1, 1)
    assert not counter.adapts
    assert set(run(counter, LOADED, 100)) == {1} and counter.probes == 0


def test_counts_below_one_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        ThreadCount(0, 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=1e-4, max_value=1.0), min_size=1, max_size=300))
def test_any_times_keep_the_invariants(times):
    counter = ThreadCount(4, 2)
    for seconds in times:
        assert counter.now() in (4, 2)
        counter.record(seconds)
    assert counter.switches <= counter.probes <= len(times) // 2 + 1


def test_a_fused_model_adapts_where_its_threads_are_measured_and_switching_keeps_the_tokens(smollm2, monkeypatch):
    model, tok = smollm2
    fast = fuse(model)
    if not (fast.numpy_step.compiled or blas.can_limit_threads()):
        pytest.skip("NumPy's BLAS here is not one whose threads can be set, and the kernel is not compiled")
    assert fast.numpy_step.adaptive is not None and fast.numpy_step.adaptive.best >= 1

    class EveryStep(ThreadCount):  # switches at every step: the worst case for the numbers
        def now(self):
            self.running = self.other if self.running == self.best else self.best
            return self.running

    fast.numpy_step.adaptive = EveryStep(2, 1)
    prompt = tok.encode_chat("Name three planets.")
    assert generate(fast, prompt, 24).tolist() == generate(model, prompt, 24).tolist()


def test_a_batch_steps_threads_follow_the_load_per_batch_size_and_switching_keeps_the_numbers(tiny, monkeypatch,
                                                                                                 tmp_path):
    import torch

    from llmperf.fast import numpy_step
    from llmperf.generation import new_cache

    monkeypatch.setenv("LLMPERF_CACHE_DIR", str(tmp_path))
    pytorchs = torch.get_num_threads()
    fast = fuse(tiny, pack=True)
    step = fast.numpy_step
    assert step.batch_counts == {}  # made, and held off while pack() measured its choices

    class EveryStep(ThreadCount):  # switches at every step: the worst case for the numbers
        def __init__(self, best, other):
            super().__init__(best, 1 if best > 1 else 2)  # a count that differs, on any machine

        def now(self):
            self.running = self.other if self.running == self.best else self.best
            return self.running

    monkeypatch.setattr(numpy_step, "ThreadCount", EveryStep)
    for rows in (2, 3):
        caches = new_cache(tiny, rows, 8), new_cache(tiny, rows, 8)
        for pos in range(4):
            tokens, at = torch.arange(rows)[:, None] + 3 * pos, torch.full((rows, 1), pos)
            with torch.inference_mode():
                plain, fused = tiny(tokens, at, caches[0]), fast(tokens, at, caches[1])
            assert torch.allclose(fused, plain, atol=1e-5)
            assert torch.get_num_threads() == pytorchs  # PyTorch's own count again once the step is done
    counted = {rows for rows, _, _ in step.batch_counts}
    assert counted == {2, 3} and all(c.best >= 1 for c in step.batch_counts.values())
    torch.set_num_threads(1)  # the reader's own count, set anew: counted on its own, and kept after the step
    step.kernel_rows = 0  # the batch's products in PyTorch, whose count that is, whatever this host measured
    try:
        with torch.inference_mode():
            fast(torch.tensor([[3], [4], [5]]), torch.tensor([[4], [4], [4]]), caches[1])
        assert torch.get_num_threads() == 1 and any(best == 1 for _, _, best in step.batch_counts)
    finally:
        torch.set_num_threads(pytorchs)
    step.batch_counts = None  # as while a choice is measured: PyTorch's count as it is
    assert step.batch_count(2, False) is None

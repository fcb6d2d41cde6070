"""Sampling, stopping, batching and streaming behave as documented."""

import time

import torch

from llmperf import generate, stream


def test_greedy_is_deterministic_and_top_k_1_is_greedy(tiny):
    a = generate(tiny, [5, 6, 7], 12)
    b = generate(tiny, [5, 6, 7], 12, temperature=0.8, top_k=1, seed=3)
    assert a.tolist() == generate(tiny, [5, 6, 7], 12).tolist() == b.tolist()


def test_seeded_sampling_is_reproducible(tiny):
    a = generate(tiny, [5, 6, 7], 16, temperature=1.0, seed=11)
    b = generate(tiny, [5, 6, 7], 16, temperature=1.0, seed=11)
    assert a.tolist() == b.tolist()
    naive = generate(tiny, [5, 6, 7], 16, temperature=1.0, seed=11, cache=False)
    assert naive.tolist() == a.tolist()


def test_stop_ids_end_generation_and_are_kept(tiny):
    full = generate(tiny, [1, 2, 3], 20).tolist()
    stop = full[4]
    first = full.index(stop)
    out = generate(tiny, [1, 2, 3], 20, stop_ids=[stop]).tolist()
    assert out == full[:first + 1]


def test_batch_generation_matches_single_sequences(tiny):
    prompts = torch.tensor([[1, 2, 3, 4], [9, 8, 7, 6]])
    batch = generate(tiny, prompts, 10)
    assert batch.shape == (2, 10)
    for row, prompt in zip(batch, prompts):
        assert row.tolist() == generate(tiny, prompt, 10).tolist()


def test_stream_yields_generate_tokens_with_increasing_times(tiny):
    t0 = time.perf_counter()
    events = list(stream(tiny, [3, 1, 4, 1, 5], 9))
    ids = [tok for tok, _ in events]
    times = [t for _, t in events]
    assert ids == generate(tiny, [3, 1, 4, 1, 5], 9).tolist()
    assert t0 < times[0] and all(a <= b for a, b in zip(times, times[1:]))


def test_naive_and_cached_loops_agree_logit_for_logit(tiny):
    from llmperf.generation import greedy_logits

    cached_ids, cached = greedy_logits(tiny, [5, 6, 7, 8], 10, cache=True)
    naive_ids, naive = greedy_logits(tiny, [5, 6, 7, 8], 10, cache=False)
    assert cached.shape == naive.shape == (10, tiny.cfg.vocab_size)
    assert cached_ids.tolist() == naive_ids.tolist() == generate(tiny, [5, 6, 7, 8], 10).tolist()
    assert torch.allclose(cached, naive, atol=1e-5)

"""Sampling, stopping, batching and streaming behave as documented."""

import time

import pytest

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


@pytest.mark.parametrize("static", [False, True])
def test_sequences_at_their_own_positions_match_one_at_a_time(tiny, static):
    """Continuous batching's step: two sequences of different lengths decoded in one pass, each at its own
    position, give the logits each gets decoded alone."""
    from llmperf import decode_step, new_cache, prefill

    torch.manual_seed(0)
    prompts = [torch.randint(0, tiny.cfg.vocab_size, (1, n)) for n in (5, 9)]
    alone, caches = [], []
    for p in prompts:
        c = new_cache(tiny, 1, 16)
        token = prefill(tiny, p, c).argmax(-1, keepdim=True)  # (1, 1)
        caches.append((c, token))
        alone.append(decode_step(tiny, token, p.shape[1], c))
    batch = new_cache(tiny, 2, 16, static=static)
    for slot, (p, (c, _)) in enumerate(zip(prompts, caches)):
        batch.load(slot, c, p.shape[1])
    tokens = torch.cat([t for _, t in caches])  # (2, 1)
    together = decode_step(tiny, tokens, torch.tensor([5, 9]), batch)
    assert torch.allclose(together, torch.cat(alone), atol=1e-5)


def test_per_sequence_positions_are_checked(tiny):
    from llmperf import new_cache
    from llmperf.kv_cache import CacheOverflowError, causal_mask

    assert causal_mask(torch.tensor([[1], [3]]), 4).tolist() == [[[[True, True, False, False]]],
                                                               [[[True, True, True, True]]]]
    cache = new_cache(tiny, 2, 8)
    with pytest.raises(ValueError, match="one row per sequence"):
        cache.begin_pass(torch.tensor([[1], [2], [3]]), 2)
    with pytest.raises(CacheOverflowError, match="does not fit"):
        cache.begin_pass(torch.tensor([[1], [8]]), 2)
    with pytest.raises(ValueError, match="Slot 2 does not exist"):
        cache.load(2, new_cache(tiny, 1, 8), 4)
    with pytest.raises(ValueError, match="Slot 2 does not exist in a cache of batch size 2"):
        cache.load(0, new_cache(tiny, 2, 8), 4, source_slot=2)


@pytest.mark.parametrize("temperature", [1e-30, 1e-300, 5e-324])
def test_a_tiny_temperature_samples_the_top_token(temperature):
    """1e-300 is 0 in float32: divided as it is, the top logit would be 0 / 0 = NaN and sampling would fail."""
    from llmperf.generation import sample

    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(0))
    assert sample(logits, temperature).tolist() == logits.argmax(dim=-1, keepdim=True).tolist()

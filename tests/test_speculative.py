"""Speculative decoding by prompt lookup: the drafter, the i.i.d. arithmetic, and a draft-and-verify loop whose
tokens are greedy decoding's, counted pass by pass."""

import random
import subprocess
import sys

import pytest

from llmperf.generation import generate
from llmperf.speculative import (Pass, Speculation, accepted_prefix, expected_tokens_per_pass, prompt_lookup_draft,
                                 speculative_generate, speedup)


# --- the drafter ------------------------------------------------------------------------------

@pytest.mark.parametrize("tokens, k, ngram, draft", [
    ([1, 2, 3, 4, 5, 1, 2, 3], 2, 3, [4, 5]),  # the trigram 1 2 3 occurred before: what followed it
    ([1, 2, 3, 4, 5, 1, 2, 3], 10, 3, [4, 5, 1, 2, 3]),  # at most to the end of the context
    ([1, 2, 3, 7, 1, 2, 3, 8, 1, 2, 3], 1, 3, [8]),  # the newest earlier occurrence wins
    ([9, 2, 3, 4, 5, 6, 2, 3], 2, 3, [4, 5]),  # no trigram match: the bigram 2 3 is looked up
    ([9, 8, 3, 4, 5, 6, 7, 3], 3, 3, [4, 5, 6]),  # then the last token alone
    ([1, 2, 3, 4], 4, 3, []),  # nothing repeats
    ([5, 5], 3, 3, [5]),  # a window may overlap the suffix, never be it
    ([5], 3, 3, []),
    ([], 3, 3, []),
    ([1, 2, 1, 2], 0, 3, []),
])
def test_prompt_lookup_drafts_what_followed_the_last_ngram(tokens, k, ngram, draft):
    assert prompt_lookup_draft(tokens, k, ngram) == draft


def test_prompt_lookup_prefers_the_longest_ngram():
    # the bigram 4 5 last occurred before 9, but the trigram 3 4 5 before 7: the longer match is the draft
    tokens = [3, 4, 5, 7, 0, 4, 5, 9, 3, 4, 5]
    assert prompt_lookup_draft(tokens, 1, ngram=3) == [7]
    assert prompt_lookup_draft(tokens, 1, ngram=2) == [9]


@pytest.mark.parametrize("k, ngram", [(-1, 3), (2, 0)])
def test_prompt_lookup_refuses_bad_arguments(k, ngram):
    with pytest.raises(ValueError, match="Need k >= 0 and ngram >= 1"):
        prompt_lookup_draft([1, 2, 3], k, ngram)


def test_the_drafter_and_the_arithmetic_import_no_torch():
    code = ("import sys; from llmperf.speculative import prompt_lookup_draft, speedup; "
            "assert prompt_lookup_draft([1, 2, 1], 1, 1) == [2]; assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("draft, target, a", [
    ([], [7], 0), ([1, 2, 3], [1, 2, 3, 4], 3), ([1, 2, 3], [1, 9, 3, 4], 1), ([1, 2], [5, 2, 0], 0)])
def test_the_accepted_prefix_stops_at_the_first_disagreement(draft, target, a):
    assert accepted_prefix(draft, target) == a


# --- the arithmetic ---------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 0.99, 1.0])
@pytest.mark.parametrize("k", [0, 1, 4, 8])
def test_expected_tokens_is_the_geometric_sum(alpha, k):
    assert expected_tokens_per_pass(alpha, k) == pytest.approx(sum(alpha ** j for j in range(k + 1)))


def test_expected_tokens_matches_a_simulated_iid_drafter():
    rng = random.Random(0)
    alpha, k, trials = 0.7, 4, 20_000
    total = 0
    for _ in range(trials):
        a = 0
        while a < k and rng.random() < alpha:
            a += 1
        total += a + 1
    assert total / trials == pytest.approx(expected_tokens_per_pass(alpha, k), rel=0.02)


def test_the_speedup_is_leviathans():
    # E / (1 + k c): at c = 0 the speed-up is E; a draft costing a tenth of a pass, k = 4, alpha = 0.8
    assert speedup(0.8, 4, 0.0) == pytest.approx(expected_tokens_per_pass(0.8, 4))
    assert speedup(0.8, 4, 0.1) == pytest.approx((1 - 0.8 ** 5) / (0.2 * 1.4))
    assert speedup(0.8, 4, 0.0, verify_cost=2.0) == pytest.approx(expected_tokens_per_pass(0.8, 4) / 2)
    assert speedup(0.0, 4, 0.1) < 1  # nothing accepted: the draft's cost is pure loss


@pytest.mark.parametrize("call", [lambda: expected_tokens_per_pass(1.2, 3), lambda: expected_tokens_per_pass(0.5, -1),
                                  lambda: speedup(0.5, 2, -0.1), lambda: speedup(0.5, 2, 0.1, verify_cost=0)])
def test_the_arithmetic_refuses_impossible_inputs(call):
    with pytest.raises(ValueError):
        call()


def test_a_speculation_counts_its_passes():
    spec = Speculation([0] * 9, k=4, ngram=3, passes=[Pass(0, 0, 0.1), Pass(4, 4, 0.1), Pass(4, 1, 0.1)])
    assert spec.drafted == 8 and spec.accepted == 5 and spec.alpha == 5 / 8
    assert spec.tokens_per_pass == (1 + 5 + 2) / 3
    assert spec.rejections == 1 and spec.alpha_iid == 5 / 6  # the third pass's last 3 drafts were never tried
    assert spec.expected_per_pass() == pytest.approx((1 + 2 * expected_tokens_per_pass(5 / 6, 4)) / 3)
    empty = Speculation([0], 4, 3)
    assert empty.alpha == empty.alpha_iid == empty.tokens_per_pass == empty.expected_per_pass() == 0.0


def test_the_iid_estimate_recovers_a_simulated_drafters_alpha():
    """Drafts accepted i.i.d. with alpha = 0.7: accepted ÷ (accepted + rejections) finds 0.7, while the share of
    drafted tokens accepted counts the untried drafts after each rejection as failures and comes out low."""
    rng = random.Random(1)
    passes = []
    for _ in range(5_000):
        a = 0
        while a < 4 and rng.random() < 0.7:
            a += 1
        passes.append(Pass(4, a, 0.0))
    spec = Speculation([], k=4, ngram=3, passes=passes)
    assert spec.alpha_iid == pytest.approx(0.7, abs=0.02) and spec.alpha < 0.6


# --- the loop ---------------------------------------------------------------------------------

def repeating_prompt(vocab: int, seed: int = 0) -> list[int]:
    """A prompt that repeats a stretch of itself, so that prompt lookup has something to draft."""
    rng = random.Random(seed)
    stretch = [rng.randrange(vocab) for _ in range(12)]
    return stretch + [rng.randrange(vocab) for _ in range(5)] + stretch[:4]


@pytest.mark.parametrize("k", [0, 1, 3, 8])
@pytest.mark.parametrize("n_new", [1, 2, 17])
def test_speculative_tokens_are_greedy_tokens_on_a_random_model(tiny, k, n_new):
    prompt = repeating_prompt(tiny.cfg.vocab_size)
    spec = speculative_generate(tiny, prompt, n_new, k=k)
    assert spec.tokens == generate(tiny, prompt, n_new).tolist()
    assert len(spec.tokens) == n_new and len(spec.passes) <= max(n_new - 1, 0)
    assert sum(p.emitted for p in spec.passes) == n_new - 1  # every token after the prefill's, from one pass
    assert all(0 <= p.accepted <= p.drafted <= k and p.seconds >= p.draft_seconds >= 0 for p in spec.passes)
    if k == 0:
        assert len(spec.passes) == n_new - 1 and spec.drafted == 0  # plain decoding, one pass per token


def test_speculation_on_a_copying_task_accepts_drafts_and_keeps_greedys_tokens(smollm2):
    from llmperf.chapters.chain import COPY_TASK

    model, tokenizer = smollm2
    ids = tokenizer.encode_chat(COPY_TASK)
    spec = speculative_generate(model, ids, 40, k=8)
    assert spec.tokens == generate(model, ids, 40).tolist()
    # the answer copies the prompt: most drafted tokens are accepted, far fewer passes than tokens
    assert spec.alpha > 0.5 and len(spec.passes) < 20 and spec.tokens_per_pass > 2
    assert [p.drafted for p in spec.passes].count(0) < len(spec.passes)


def test_the_loop_refuses_what_does_not_fit(tiny):
    with pytest.raises(ValueError, match="max_new_tokens >= 1"):
        speculative_generate(tiny, [1, 2, 3], 0)
    with pytest.raises(ValueError, match="exceed"):
        speculative_generate(tiny, [1, 2, 3], tiny.cfg.max_seq_len)


def test_rejected_drafts_need_no_rollback(tiny, monkeypatch):
    """Drafts that are mostly wrong leave stale keys in the cache after every pass; the next pass overwrites
    them before attention reads them, so the tokens are still greedy decoding's."""
    from llmperf import speculative

    prompt = repeating_prompt(tiny.cfg.vocab_size, seed=3)
    greedy = generate(tiny, prompt, 24).tolist()
    rng = random.Random(1)

    def wrong_then_right(tokens, k, ngram=3):  # the right next token half the time, then noise
        n = len(tokens) - len(prompt)
        right = greedy[n:n + 1] if rng.random() < 0.5 else []
        return right + [rng.randrange(tiny.cfg.vocab_size) for _ in range(k - len(right))]

    monkeypatch.setattr(speculative, "prompt_lookup_draft", wrong_then_right)
    spec = speculative_generate(tiny, prompt, 24, k=6)
    assert sum(p.accepted < p.drafted for p in spec.passes) >= len(spec.passes) // 2  # rejections aplenty...
    assert any(p.accepted for p in spec.passes)
    assert spec.tokens == greedy  # ...and the tokens are unchanged

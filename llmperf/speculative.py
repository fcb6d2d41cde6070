"""Speculative decoding by prompt lookup: draft tokens from the context's own n-grams, verify them in one pass.

A plain greedy loop runs one target pass per new token. Speculative decoding
(Leviathan et al. 2023; Chen et al. 2023) lets something cheap guess the next
few tokens and has the target check all the guesses in a single pass. Prompt
lookup (Saxena 2023) needs no draft model: when the last few tokens already
occurred earlier in the context, it guesses that what followed them then
follows them again. Texts that copy from their prompt (editing, quoting,
summarising with the prompt's own words) are full of such repeats.

One pass of `speculative_generate`, with the cache holding positions 0..p-1 and
`last` the newest token, at position p, not yet in the cache:

    draft  d_1..d_m         = prompt_lookup_draft(context, k, ngram), m <= k
    verify [last, d_1..d_m]   at positions p..p+m, one forward pass, every position's logits
    target g_0..g_m          = argmax of each position's logits (g_i follows d_i; g_0 follows `last`)
    accept d_1..d_a          the longest prefix with d_i == g_(i-1)
    emit   d_1..d_a, g_a     a + 1 tokens: the accepted prefix and the target's own next token

Every emitted token is the target's greedy choice given the tokens before it,
so the output is identical to greedy `generation.generate`. (A pass over
several tokens rounds differently from one over a single token, which could
flip a near-tie between two logits; the tests hold the course's model to
identical tokens.)
Rejected drafts leave keys and values at positions p+a+1..p+m; the dynamic
cache reads positions 0..last only, and the next pass writes p+a+1 onwards
before it reads them, so a rejection needs no rollback.

Counted per verify pass (`Pass`): tokens drafted, tokens accepted, seconds.
The first token comes from the prefill, as in `generate`, and is no pass's.
`prompt_lookup_draft` and the arithmetic (`expected_tokens_per_pass`,
`speedup`) are pure Python; only `speculative_generate` imports torch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field


def prompt_lookup_draft(tokens: Sequence[int], k: int, ngram: int = 3) -> list[int]:
    """Up to `k` tokens guessed to follow `tokens`: what followed the latest earlier occurrence of its last n-gram.

    Tries n = `ngram`, then shorter n-grams down to 1, as prompt lookup does (a long match is the better
    guess; a short one still often right). For each n, the last n tokens are looked for among the earlier
    windows, newest first (the window ending at the last token itself is not a match); the first match's
    continuation, at most `k` tokens and never past the end of `tokens`, is the draft. No match: [].
    """
    if k < 0 or ngram < 1:
        raise ValueError(f"Need k >= 0 and ngram >= 1, got k={k}, ngram={ngram}.")
    tokens = list(tokens)
    n_tokens = len(tokens)
    if k == 0:
        return []
    for n in range(min(ngram, n_tokens - 1), 0, -1):
        suffix = tokens[n_tokens - n:]
        for start in range(n_tokens - n - 1, -1, -1):  # newest earlier window first
            if tokens[start:start + n] == suffix:
                return tokens[start + n:start + n + k]  # non-empty: start + n <= n_tokens - 1
    return []


def accepted_prefix(draft: Sequence[int], target: Sequence[int]) -> int:
    """How many drafted tokens the target agrees with: the longest a with draft[i] == target[i] for i < a.

    target[i] is the target's greedy choice after the context and draft[:i], so it needs len(draft) + 1
    entries (the last one, the choice after the whole draft, only ever serves as the bonus token).
    """
    a = 0
    while a < len(draft) and draft[a] == target[a]:
        a += 1
    return a


# --- the arithmetic -------------------------------------------------------------------------------

def expected_tokens_per_pass(alpha: float, k: int) -> float:
    """Expected tokens one verify pass yields with `k` drafted tokens, each accepted with probability `alpha`
    independently of the others (given the ones before it were).

    The pass yields j + 1 tokens when the first j drafts are accepted and the next is not (or j = k):
    E = sum_{j=0}^{k} alpha^j = (1 - alpha^(k+1)) / (1 - alpha), and k + 1 at alpha = 1.
    """
    if not 0 <= alpha <= 1 or k < 0:
        raise ValueError(f"Need 0 <= alpha <= 1 and k >= 0, got alpha={alpha}, k={k}.")
    if alpha == 1:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def speedup(alpha: float, k: int, draft_cost: float, verify_cost: float = 1.0) -> float:
    """Tokens per unit of time against plain decoding: E / (verify_cost + k · draft_cost).

    `draft_cost` (c) is one drafted token's cost and `verify_cost` one verify pass of k + 1 tokens, both
    in plain decode steps of the target. With verify_cost = 1 (a pass of k + 1 tokens as cheap as one of
    one token, the target bound by reading its weights) this is Leviathan et al.'s E / (1 + k c).
    """
    if draft_cost < 0 or verify_cost <= 0:
        raise ValueError(f"Need draft_cost >= 0 and verify_cost > 0, got {draft_cost}, {verify_cost}.")
    return expected_tokens_per_pass(alpha, k) / (verify_cost + k * draft_cost)


# --- the loop -------------------------------------------------------------------------------------

@dataclass
class Pass:
    """One verify pass: tokens drafted (0 when nothing matched: a plain decode step), tokens accepted, and its
    seconds: the whole pass (`seconds`, drafting included) and the drafting alone (`draft_seconds`)."""

    drafted: int
    accepted: int
    seconds: float
    draft_seconds: float = 0.0

    @property
    def emitted(self) -> int:
        """Tokens this pass adds to the output: the accepted drafts and the target's own next token."""
        return self.accepted + 1


@dataclass
class Speculation:
    """`speculative_generate`'s output: the new tokens, and every verify pass after the prefill's first token."""

    tokens: list[int]
    k: int
    ngram: int
    passes: list[Pass] = field(default_factory=list)

    @property
    def drafted(self) -> int:
        return sum(p.drafted for p in self.passes)

    @property
    def accepted(self) -> int:
        return sum(p.accepted for p in self.passes)

    @property
    def alpha(self) -> float:
        """Accepted ÷ drafted: the share of drafted tokens accepted, as acceptance is usually quoted (0 if none)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def rejections(self) -> int:
        """Passes that stopped at a rejected draft (accepted fewer tokens than they drafted)."""
        return sum(p.accepted < p.drafted for p in self.passes)

    @property
    def alpha_iid(self) -> float:
        """The i.i.d. model's per-token acceptance probability, estimated from the trials the model defines.

        A pass tries its drafts in order and stops at the first rejection: it contributes its accepted drafts
        as successes and, if it stopped early, one failure; the drafts after a rejection were never tried.
        accepted ÷ (accepted + rejections) is then the maximum-likelihood estimate. It is at least `alpha`,
        which counts the untried drafts as failures (0 if nothing was tried)."""
        trials = self.accepted + self.rejections
        return self.accepted / trials if trials else 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Tokens the verify passes emitted, per pass (the prefill's first token not counted)."""
        return sum(p.emitted for p in self.passes) / len(self.passes) if self.passes else 0.0

    def expected_per_pass(self) -> float:
        """The i.i.d. model's tokens per pass at its estimated alpha (`alpha_iid`), each pass with the draft it
        really had: the mean of E(alpha_iid, m_i) over passes (m_i = that pass's drafted tokens, at most k)."""
        if not self.passes:
            return 0.0
        return sum(expected_tokens_per_pass(self.alpha_iid, p.drafted) for p in self.passes) / len(self.passes)


def speculative_generate(model, prompt_ids: Sequence[int], max_new_tokens: int, k: int = 8,
                         ngram: int = 3) -> Speculation:
    """Greedy generation of one sequence, drafting up to `k` tokens a pass by prompt lookup and verifying them
    in one pass of the target; the same tokens as `generation.generate(model, prompt_ids, max_new_tokens)`.

    Exactly `max_new_tokens` tokens (no stop token). Each pass drafts no more than the tokens still wanted
    after its own bonus token, so no pass writes past the cache.
    """
    import torch

    from .generation import new_cache, prefill

    prompt = [int(t) for t in prompt_ids]
    if max_new_tokens < 1 or k < 0:
        raise ValueError(f"Need max_new_tokens >= 1 and k >= 0, got {max_new_tokens}, {k}.")
    if len(prompt) + max_new_tokens > model.cfg.max_seq_len:
        raise ValueError(f"{len(prompt)} prompt tokens + {max_new_tokens} new ones exceed {model.cfg.name}'s "
                         f"{model.cfg.max_seq_len} positions.")
    cache = new_cache(model, 1, len(prompt) + max_new_tokens)
    spec = Speculation([], k, ngram)
    with torch.inference_mode():
        logits = prefill(model, torch.tensor([prompt], device=model.device), cache)  # (1, vocab)
        spec.tokens.append(int(logits.argmax(-1)))
        while len(spec.tokens) < max_new_tokens:
            t0 = time.perf_counter()
            context = prompt + spec.tokens
            draft = prompt_lookup_draft(context, k, ngram)[:max_new_tokens - len(spec.tokens) - 1]
            drafted_at = time.perf_counter()
            x = torch.tensor([[spec.tokens[-1], *draft]], device=model.device)  # (1, m + 1)
            logits = prefill(model, x, cache, start=len(context) - 1, all_logits=True)  # (1, m + 1, vocab)
            target = logits[0].argmax(-1).tolist()  # the target's choice after each fed token
            a = accepted_prefix(draft, target)
            spec.tokens += draft[:a] + [target[a]]
            # tolist() waited for the device
            spec.passes.append(Pass(len(draft), a, time.perf_counter() - t0, drafted_at - t0))
    return spec

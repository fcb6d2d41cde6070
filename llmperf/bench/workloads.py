"""What a load generator asks a server for: how long each prompt is, how many tokens each answer gets, and
which prompts share a prefix. All drawn from a seed, so two runs (or two servers) get the same requests.

- `lengths`: n lengths around a mean, as the peers draw them. "fixed" is the mean every time; "uniform" is vLLM's
  random dataset (`--random-range-ratio`: uniform over mean·(1 ± spread)); "normal" is guidellm's (a standard
  deviation of spread·mean, clipped to at least 1); "exponential" a long tail (spread ignored), as real chat
  answers have. Output lengths only mean what they say when the server is told to ignore its end-of-sequence
  token (`ignore_eos`, which `llmperf.bench` sends).
- `prompts`: random token ids of those lengths, sent as ids, so they are as long on any server whatever its
  tokenizer; with `prefix` > 0, requests fall into `groups` that each share their first `prefix` ids (SGLang's
  generated-shared-prefix workload, a system prompt shared by many users): what a prefix cache can reuse.
"""

from __future__ import annotations

import random

DISTRIBUTIONS = ("fixed", "uniform", "normal", "exponential")


def lengths(n: int, mean: int, spread: float = 0.0, distribution: str = "fixed", seed: int = 0) -> list[int]:
    """`n` whole lengths of at least 1, drawn around `mean` (see the module's docstring)."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"Unknown length distribution {distribution!r}; choose from {', '.join(DISTRIBUTIONS)}.")
    if n < 0 or mean < 1:
        raise ValueError(f"Need n >= 0 and a mean length of at least 1; got n={n} and mean={mean}.")
    if not 0 <= spread < 1 and distribution == "uniform":
        raise ValueError(f"A uniform spread is a fraction of the mean in [0, 1), got {spread}.")
    if spread < 0:
        raise ValueError(f"spread must be 0 or more, got {spread}.")
    rng = random.Random(seed)
    if distribution == "fixed":
        return [mean] * n
    if distribution == "uniform":
        low, high = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
        return [rng.randint(low, high) for _ in range(n)]
    if distribution == "normal":
        return [max(1, round(rng.gauss(mean, spread * mean))) for _ in range(n)]
    return [max(1, round(rng.expovariate(1 / mean))) for _ in range(n)]


def prompts(sizes: list[int], vocab: int = 32_000, prefix: int = 0, groups: int = 1,
            seed: int = 0) -> list[list[int]]:
    """One prompt of random token ids (1000..vocab-1: ordinary tokens in most vocabularies) per size in `sizes`.
    With `prefix`, prompt i starts with group i % `groups`'s `prefix` ids, then its own `sizes[i]` ids."""
    if any(s < 1 for s in sizes) or prefix < 0 or groups < 1 or vocab <= 1000:
        raise ValueError(f"Need sizes >= 1, prefix >= 0, groups >= 1 and vocab > 1000; got sizes from "
                         f"{min(sizes, default=0)}, prefix={prefix}, groups={groups}, vocab={vocab}.")
    rng = random.Random(seed)
    shared = [[rng.randrange(1000, vocab) for _ in range(prefix)] for _ in range(groups)]
    return [shared[i % groups] + [rng.randrange(1000, vocab) for _ in range(size)] for i, size in enumerate(sizes)]

"""Sampling the next token of many sequences at once, each with its own temperature, top-k, top-p and seed.

One step of a served batch gives logits (B, vocab), one row per request. `sample_rows` turns them into B token ids
in one pass over the batch, without the host waiting for the device: no `.item()`, no `int(tensor)`, no Python
branch on a tensor's value. Every decision that depends on the parameters is made in Python from the parameters
themselves, which the host already holds.

A sampled row goes through these steps, batched over the rows (`probabilities`):

    logits -> shift so the row's largest is 0 -> / temperature -> top-k -> top-p (nucleus) -> softmax -> draw

- top-k keeps the tokens whose logit is at least the row's k-th largest (ties with it are kept);
- top-p keeps the smallest set of most likely tokens whose probability adds up to at least p, and always the most
  likely one (Holtzman et al., 2020, as vLLM applies it: after top-k, on the distribution top-k left);
- a row at temperature 0 is greedy: its token is the argmax of its logits, whatever noise the batch drew.

The draw (`multinomial`) is the one `torch.multinomial(probs, 1, generator=g)` makes, argmax(probs / E) with
E ~ Exp(1) drawn as one block from `g`, written out because `torch.multinomial` checks its input with a host
synchronisation. A seeded row draws from its own generator, a (1, vocab) block, as `generation.sample` draws for
one sequence alone: so a seeded request gets the same tokens whatever it is batched with. The rows without a
seed draw from torch's default generator.

`generation.sample` uses the same functions, so the two agree bit for bit. The temperature divides as a tensor
in both: on CUDA, PyTorch applies a division by a Python number as a multiplication by its reciprocal, which
can differ in the last bit.

Not checked here, since it would need the values on the host: NaN logits. A row of them gives some token
rather than an error.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

TINY = torch.finfo(torch.float32).tiny  # the smallest normal float32: the smallest temperature divided by


def rows_tensor(values: Sequence, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`values` (B,) as a tensor on `device`, copied without the host waiting: on CUDA from pinned memory,
    non-blocking (a copy from ordinary memory waits for the device to finish its queue)."""
    rows = torch.tensor(list(values), dtype=dtype)
    if device.type == "cuda":
        return rows.pin_memory().to(device, non_blocking=True)
    return rows.to(device)


def _top_k(logits: torch.Tensor, top_k: Sequence[int | None]) -> torch.Tensor:
    """`logits` (B, vocab) with each row's tokens below its k-th largest logit set to -inf (None: none)."""
    ks = [None if k is None else min(k, logits.shape[-1]) for k in top_k]  # a k past the vocabulary keeps it all
    widest = max(k for k in ks if k is not None)
    values = torch.topk(logits, widest, dim=-1).values  # (B, widest), each row in descending order
    values = torch.cat([values, values.new_full((len(ks), 1), float("-inf"))], dim=-1)  # (B, widest + 1)
    # Row b's threshold is its k-th largest value, or the -inf column for a row without top-k.
    index = rows_tensor([widest if k is None else k - 1 for k in ks], torch.long, logits.device)  # (B,)
    kth = values.gather(-1, index[:, None])  # (B, 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def _top_p(logits: torch.Tensor, top_p: Sequence[float]) -> torch.Tensor:
    """`logits` (B, vocab) with each row's tokens outside its nucleus set to -inf (a row at top_p 1 keeps all).

    In each row's descending order of probability, a token is kept if the tokens before it add up to less than
    p: the smallest set that reaches p, the most likely token always in it. The order among equal probabilities
    is the stable sort's (by token id), so a row keeps the same tokens in any batch."""
    probs = torch.softmax(logits, dim=-1)  # (B, vocab)
    ranked, order = torch.sort(probs, dim=-1, descending=True, stable=True)  # (B, vocab) each
    before = torch.cumsum(ranked, dim=-1)[:, :-1]  # (B, vocab - 1): mass of the tokens ranked above the next
    before = torch.cat([torch.zeros_like(ranked[:, :1]), before], dim=-1)  # (B, vocab): above each token
    limit = rows_tensor([p if p < 1 else float("inf") for p in top_p], torch.float32, logits.device)  # (B,)
    dropped_ranked = before >= limit[:, None]  # (B, vocab), in ranked order
    dropped_ranked[:, 0] = False  # the most likely token stays, even for a top-p that is 0 in float32 (1e-300)
    dropped = torch.zeros_like(dropped_ranked).scatter_(-1, order, dropped_ranked)  # (B, vocab), in vocab order
    return logits.masked_fill(dropped, float("-inf"))


def probabilities(logits: torch.Tensor, temperature: Sequence[float], top_k: Sequence[int | None],
                  top_p: Sequence[float]) -> torch.Tensor:
    """The distribution (B, vocab), float32, that each row of `logits` (B, vocab) is sampled from.

    Every temperature must be above 0. Each row's logits are shifted so that the largest is 0 before dividing:
    softmax is the same, and a tiny temperature sends the others to -inf, never inf - inf = NaN, so the row
    samples its argmax. A temperature below float32's smallest normal number (1e-300 is 0 in float32, and
    0 / 0 is NaN) divides as that number, which gives the same distribution: all of it on the largest logits.
    Row b depends only on row b's logits and parameters, bit for bit, whatever the other rows are.
    """
    divisor = rows_tensor([max(t, TINY) for t in temperature], torch.float32, logits.device)  # (B,)
    logits = logits.float()
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / divisor[:, None]  # (B, vocab), each row's largest 0
    if any(k is not None for k in top_k):
        logits = _top_k(logits, top_k)
    if any(p < 1 for p in top_p):
        logits = _top_p(logits, top_p)
    return torch.softmax(logits, dim=-1)


def multinomial(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row (B,) drawn from `probs` (B, vocab): the token `torch.multinomial(probs, 1,
    generator=generator)` draws, without its host synchronisation (it checks the probabilities on the host).

    Exponential noise E (B, vocab) comes from `generator` (None: torch's default) as one block, and the token is
    argmax(probs / E): the exponential form of the Gumbel-max trick, which is how torch draws one sample."""
    noise = torch.empty_like(probs).exponential_(1, generator=generator)  # (B, vocab), E ~ Exp(1)
    return (probs / noise).argmax(dim=-1)


def sample_rows(logits: torch.Tensor, temperature: Sequence[float], top_k: Sequence[int | None],
                top_p: Sequence[float], generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """The next token of each row of `logits` (B, vocab): a (B,) long tensor on logits' device.

    Row b is sampled at `temperature[b]` (0: greedy), keeping its `top_k[b]` most likely tokens (None: all),
    then its nucleus of mass `top_p[b]` (in (0, 1]; 1: all), and drawn from `generators[b]` (None: torch's
    default generator). A row with a generator gets the token `generation.sample` gives for that row alone with
    that generator, bit for bit. No host synchronisation: the result is left on the device.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be (batch, vocab); got shape {tuple(logits.shape)}.")
    B = logits.shape[0]
    for name, values in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p),
                         ("generators", generators)):
        if len(values) != B:
            raise ValueError(f"{name} must give one value per row: {B} rows of logits, {len(values)} {name}.")
    if any(t < 0 for t in temperature):
        raise ValueError(f"temperature must be 0 (greedy) or more for every row; got {list(temperature)}.")
    if any(k is not None and k < 1 for k in top_k):
        raise ValueError(f"top_k must be at least 1 (or None: every token) for every row; got {list(top_k)}.")
    if any(not 0 < p <= 1 for p in top_p):
        raise ValueError(f"top_p must lie in (0, 1] for every row; got {list(top_p)}.")

    greedy = logits.argmax(dim=-1)  # (B,)
    sampled = [t > 0 for t in temperature]
    if not any(sampled):
        return greedy
    # Greedy rows go through the arithmetic at temperature 1, and their draw is discarded.
    probs = probabilities(logits, [t if s else 1.0 for t, s in zip(temperature, sampled)], top_k, top_p)
    if any(s and g is None for s, g in zip(sampled, generators)):
        tokens = multinomial(probs)  # (B,): every row from the default generator; the seeded ones are redrawn
    else:
        tokens = torch.empty_like(greedy)
    for b, g in enumerate(generators):
        if sampled[b] and g is not None:
            tokens[b:b + 1] = multinomial(probs[b:b + 1], g)  # (1,): row b's own (1, vocab) block of noise
    if all(sampled):
        return tokens
    return torch.where(rows_tensor(sampled, torch.bool, logits.device), tokens, greedy)

"""The autoregressive loop: prefill once, then one decode step per new token.

    prompt (B, S) --prefill--> logits of position S-1 --sample--> token S
    token t       --decode_step at position t--> logits --sample--> token t+1   (repeat)

Each decode step needs the token sampled by the step before it, so the steps
form a chain that cannot run in parallel: that is chapter 1's whole subject.

`generate(..., cache=False)` is the naive loop: no KV cache, every step re-runs
the model over the whole sequence so far. It produces the same tokens as the
cached loop at a cost that grows with the sequence (chapter 4).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import torch

from . import request_checks, sampler
from .device import synchronize
from .kv_cache import KVCache
from .model import Transformer


def new_cache(model: Transformer, batch_size: int, capacity: int, static: bool = False) -> KVCache:
    """An empty KV cache for `batch_size` sequences of up to `capacity` tokens, in the model's dtype and device."""
    return KVCache(model.cfg, batch_size, capacity, dtype=model.dtype, device=model.device, static=static)


def prefill(model: Transformer, tokens: torch.Tensor, cache: KVCache, start: int = 0,
            all_logits: bool = False, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Run tokens (B, S) at positions start..start+S-1 in one pass, writing their keys and values into `cache`.

    Returns the logits of the last position (B, vocab), which is all that sampling
    the next token needs, or with `all_logits` those of every position (B, S, vocab),
    which is what checking S drafted tokens at once needs. start > 0 extends a
    sequence already in the cache (a prompt fed in chunks, or a draft to verify).
    With `lengths` (B,), prompts of several lengths padded at the end to S: each
    row's logits are those of its own last token, position lengths[b] - 1 (a
    server's newcomers prefilled together); the padding's keys and values are
    written too, after each prompt's, and are not the prompt's.
    """
    input_pos = torch.arange(start, start + tokens.shape[1], device=tokens.device)
    rows = {} if lengths is None else {"lengths": lengths}
    logits = model(tokens, input_pos, cache, last_only=not all_logits, **rows)
    return logits if all_logits else logits[:, -1]


def decode_step(model: Transformer, token: torch.Tensor, pos: "int | torch.Tensor", cache: KVCache) -> torch.Tensor:
    """Run one new token per sequence (B, 1) at position `pos`; return its logits (B, vocab).

    `pos` is an int, or a one-element tensor on the model's device (the form a
    CUDA Graph needs, since it replays the same memory and cannot take a new
    int): every sequence at that position. A tensor of B positions puts each
    sequence at its own (a server's batch of requests of different lengths).
    """
    if not isinstance(pos, torch.Tensor):
        input_pos = torch.tensor([pos], device=token.device)  # (1,)
    elif pos.numel() == 1:
        input_pos = pos.view(1)  # (1,): shared by every sequence
    else:
        input_pos = pos.view(-1, 1)  # (B, 1): one position per sequence
    return model(token, input_pos, cache)[:, -1]


def sample(logits: torch.Tensor, temperature: float = 0.0, top_k: int | None = None,
           generator: torch.Generator | None = None, top_p: float = 1.0) -> torch.Tensor:
    """Next token per sequence, (B, 1), from logits (B, vocab). temperature 0 means greedy (argmax).

    Every row at the same temperature, top-k and top-p (`sampler.probabilities` says what each does), and all
    of them drawn from `generator` as one (B, vocab) block of noise (`sampler.multinomial`): the arithmetic and
    the draw of `sampler.sample_rows`, which gives a seeded row of a mixed batch this function's token for it.
    """
    if temperature == 0.0:
        return logits.argmax(dim=-1, keepdim=True)
    B = logits.shape[0]
    probs = sampler.probabilities(logits, [temperature] * B, [top_k] * B, [top_p] * B)  # (B, vocab)
    return sampler.multinomial(probs, generator)[:, None]  # (B, 1)


def as_batch(prompt_ids, device: torch.device) -> torch.Tensor:
    """Prompt ids as a (B, S) long tensor on `device`; a list (of whole numbers: `request_checks.token_ids`) or a 1-D
    tensor becomes batch 1. Its length and ids are `request_checks.check`'s to judge."""
    if not isinstance(prompt_ids, torch.Tensor):
        prompt_ids = request_checks.token_ids(prompt_ids)
    tokens = torch.as_tensor(prompt_ids, dtype=torch.long, device=device)
    if tokens.dim() == 1:
        tokens = tokens[None]  # (1, S)
    if tokens.dim() != 2:
        raise ValueError(f"prompt_ids must be a list of ids, or a (batch, seq_len) tensor; got shape "
                         f"{tuple(tokens.shape)}.")
    if tokens.shape[0] < 1:
        raise ValueError("Batch size must be at least 1, but the prompt tensor holds 0 sequences.")
    return tokens


def _check_request(model: Transformer, tokens: torch.Tensor, max_new_tokens: int, temperature: float,
                   top_k: int | None, seed: int | None = None, top_p: float = 1.0
                   ) -> tuple[int, float, int | None, float, int | None]:
    """`request_checks.check` against the model's whole context (max_seq_len): the same checks, and messages, as the
    engine and the server."""
    empty = tokens.numel() == 0
    return request_checks.check(prompt_tokens=tokens.shape[1], lowest_id=0 if empty else int(tokens.min()),
                        highest_id=0 if empty else int(tokens.max()),
                        max_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                        context=model.cfg.max_seq_len, vocab_size=model.cfg.vocab_size)


@torch.inference_mode()
def _token_steps(model: Transformer, tokens: torch.Tensor, max_new_tokens: int, *, cache: bool,
                 temperature: float = 0.0, top_k: int | None = None, top_p: float = 1.0,
                 seed: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield each new token (B, 1), with the logits (B, vocab) it was sampled from, as soon as it is sampled
    (not synchronised)."""
    generator = None
    if seed is not None:
        generator = torch.Generator(device=tokens.device).manual_seed(seed)
    B, S = tokens.shape
    if cache:
        kv = new_cache(model, B, S + max_new_tokens)
        logits = prefill(model, tokens, kv)
        token = sample(logits, temperature, top_k, generator, top_p)
        yield token, logits
        for pos in range(S, S + max_new_tokens - 1):
            logits = decode_step(model, token, pos, kv)
            token = sample(logits, temperature, top_k, generator, top_p)
            yield token, logits
    else:
        seq = tokens
        for _ in range(max_new_tokens):
            logits = model(seq, last_only=True)[:, -1]  # the whole sequence again, every step
            token = sample(logits, temperature, top_k, generator, top_p)
            seq = torch.cat([seq, token], dim=1)
            yield token, logits


def generate(model: Transformer, prompt_ids, max_new_tokens: int, cache: bool = True,
             temperature: float = 0.0, top_k: int | None = None, seed: int | None = None,
             stop_ids: Sequence[int] = (), top_p: float = 1.0) -> torch.Tensor:
    """Generate up to `max_new_tokens` tokens after `prompt_ids`; return only the new ones.

    prompt_ids: a list of ids or a 1-D tensor (one sequence), or a (B, S) tensor.
    Returns (n,) for one sequence, (B, n) for a batch. Generation stops early once
    every sequence has produced a token in `stop_ids` (that token is included).
    cache=False runs the naive loop, which recomputes the whole sequence every step.
    """
    tokens = as_batch(prompt_ids, model.device)
    max_new_tokens, temperature, top_k, top_p, seed = _check_request(model, tokens, max_new_tokens, temperature,
                                                                     top_k, seed, top_p)
    stop = torch.tensor(list(stop_ids), dtype=torch.long, device=tokens.device)
    done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    out = []
    for token, _ in _token_steps(model, tokens, max_new_tokens, cache=cache, temperature=temperature, top_k=top_k,
                                 top_p=top_p, seed=seed):
        out.append(token)
        if len(stop_ids):
            done |= torch.isin(token[:, 0], stop)
            if bool(done.all()):
                break
    new = torch.cat(out, dim=1)  # (B, n)
    return new[0] if torch.as_tensor(prompt_ids).dim() == 1 else new


def stream(model: Transformer, prompt_ids, max_new_tokens: int, temperature: float = 0.0,
           top_k: int | None = None, seed: int | None = None,
           stop_ids: Sequence[int] = (), top_p: float = 1.0) -> Iterator[tuple[int, float]]:
    """Yield (token_id, time) for each new token of one sequence, as it becomes available.

    `time` is time.perf_counter() right after the device finished computing that
    token, so differences between successive times are the inter-token latencies
    and the first time minus a perf_counter() taken before the call is the TTFT.
    """
    tokens = as_batch(prompt_ids, model.device)
    if tokens.shape[0] != 1:
        raise ValueError(f"stream() serves one sequence; got a batch of {tokens.shape[0]}. "
                         "Use generate() for batches.")
    max_new_tokens, temperature, top_k, top_p, seed = _check_request(model, tokens, max_new_tokens, temperature,
                                                                     top_k, seed, top_p)
    for token, _ in _token_steps(model, tokens, max_new_tokens, cache=True, temperature=temperature, top_k=top_k,
                                 top_p=top_p, seed=seed):
        synchronize(tokens.device)
        token_id = int(token)
        yield token_id, time.perf_counter()
        if token_id in stop_ids:
            return


def greedy_logits(model: Transformer, prompt_ids, max_new_tokens: int, cache: bool = True
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy generation of one sequence that keeps every step's logits: (tokens (n,), logits (n, vocab)).

    The same loop as `generate`, naive (cache=False) or cached, for comparing the
    two logit for logit.
    """
    tokens = as_batch(prompt_ids, model.device)
    if tokens.shape[0] != 1:
        raise ValueError(f"greedy_logits() follows one sequence; got a batch of {tokens.shape[0]}.")
    max_new_tokens = _check_request(model, tokens, max_new_tokens, 0.0, None)[0]
    steps = list(_token_steps(model, tokens, max_new_tokens, cache=cache))
    return torch.cat([t for t, _ in steps], dim=1)[0], torch.cat([l for _, l in steps])  # (n,), (n, vocab)

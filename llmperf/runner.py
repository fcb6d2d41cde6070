"""The model runner: everything of the serving loop that holds tensors. The scheduler (`llmperf.scheduler`) decides
which positions of which sequences a step runs; the runner runs them.

It owns the model, the paged KV cache (`PagedKVCache`: one pool of blocks, read through the scheduler's block
tables) and each seeded request's random generator, and does three things:

- `prefill(pass_, tables)`: one pass over a group's positions start..start+n-1, padded at the end; returns each
  row's logits at its own last token if the pass ends its prompts (else None);
- `decode(seqs, tables)`: one token per sequence, each at its own position; returns the logits (B, vocab);
- `sample(seqs, logits)`: one batched draw (`sampler.sample_rows`) and one copy to the host for the whole batch:
  no host synchronisation per row.
"""

from __future__ import annotations

import torch

from .generation import decode_step, prefill
from .model import Transformer
from .paged_cache import PagedKVCache
from .sampler import sample_rows
from .scheduler import Pass, Sequence


class ModelRunner:
    """Runs a scheduler's plans on `model`, with a pool of `num_blocks` blocks of `block_size` positions."""

    def __init__(self, model: Transformer, num_blocks: int, block_size: int):
        self.model = model
        self.cache = PagedKVCache(model.cfg, num_blocks, block_size, dtype=model.dtype, device=model.device)
        self.generators: dict[int, torch.Generator] = {}  # request id -> its generator, made at its first draw

    def prefill(self, p: Pass, tables: list[list[int]]) -> torch.Tensor | None:
        """Run positions p.start..p.start+p.n-1 of each sequence of `p`, each row up to its own last token and
        padded after it with token 0 (whose keys and values no one reads). Returns the logits of each row's last
        token, (k, vocab), if the pass ends its prompts; else None."""
        device, end = self.model.device, p.start + p.n
        rows = [seq.tokens[p.start:end] for seq in p.seqs]
        tokens = torch.tensor([r + [0] * (p.n - len(r)) for r in rows], device=device)  # (k, n)
        lengths = [len(r) for r in rows]
        last = torch.tensor(lengths, device=device) if min(lengths) < p.n else None  # (k,): rows shorter than n
        logits = prefill(self.model, tokens, self.cache.view(tables, end), start=p.start, lengths=last)  # (k, vocab)
        return logits if p.samples else None

    def decode(self, seqs: list[Sequence], tables: list[list[int]]) -> torch.Tensor:
        """One new token per sequence, its newest, at its own position; returns the logits, (B, vocab)."""
        device = self.model.device
        last = torch.tensor([[s.request.tokens[-1]] for s in seqs], device=device)  # (B, 1)
        positions = [s.num_tokens - 1 for s in seqs]
        view = self.cache.view(tables, max(positions) + 1)
        return decode_step(self.model, last, torch.tensor(positions, device=device), view)  # (B, vocab)

    def sample(self, seqs: list[Sequence], logits: torch.Tensor) -> list[int]:
        """Each sequence's next token from its row of `logits` (B, vocab), drawn with its request's temperature,
        top-k, top-p and generator (made from its seed at its first draw, kept until it ends)."""
        requests = [s.request for s in seqs]
        for r in requests:
            if r.seed is not None and r.id not in self.generators:
                self.generators[r.id] = torch.Generator(device=self.model.device).manual_seed(r.seed)
        tokens = sample_rows(logits, [r.temperature for r in requests], [r.top_k for r in requests],
                             [r.top_p for r in requests], [self.generators.get(r.id) for r in requests])
        return tokens.tolist()  # the step's one wait for the device

    def forget(self, request_id: int) -> None:
        """A request has ended: drop its generator."""
        self.generators.pop(request_id, None)

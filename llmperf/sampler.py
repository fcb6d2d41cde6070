"""Placeholder batched sampler (replaced by the helper's module at merge)."""
from __future__ import annotations

import torch

from .generation import sample


def sample_rows(logits, temperature, top_k, top_p, generators):
    out = [sample(logits[j:j + 1], temperature[j], top_k[j], generators[j])[:, 0] for j in range(len(logits))]
    return torch.cat(out)

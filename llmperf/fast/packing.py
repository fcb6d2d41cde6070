"""Weights packed once for products of a few rows: a batch's decode step, a prompt's prefill.

A matrix–matrix product (gemm) does not read the weight as it is stored. It copies
it first into small tiles laid out as its kernel consumes them ("packing"), then
multiplies the tiles. For a product of many rows that copy is paid once and used
many times; for a decode step of a few rows, each weight's copy is as much
memory traffic as the product itself, and the step takes up to twice as long as
its bytes say. PyTorch's CPU gemm packs on every call, so each of a decode
step's products of a few rows pays for a copy of its whole weight.

oneDNN, the library behind PyTorch's CPU convolutions, can pack a weight once
(`pack`, into its own blocked layout, as a special "mkldnn" tensor) and reuse
the packed copy at every call (`linear`): each step then reads each weight once,
for all its rows, at about the speed of one row. The extra memory is one packed
copy of each matrix. Whether this pays on a host is measured there (`tuning`,
`choices.measured_products`), not assumed; where PyTorch was built without oneDNN,
nothing is packed.
"""

from __future__ import annotations

import torch

PACK_ROWS = 32
"""The number of rows oneDNN is told to expect when it chooses a packed layout. One packed copy serves a product
of any number of rows; a layout chosen for several rows (a batch, a prompt's chunk) rather than for one is the one
that serves them all."""


def available() -> bool:
    """Can PyTorch pack weights with oneDNN here (built with it, on a processor it supports)?"""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def pack(weight: torch.Tensor) -> torch.Tensor:
    """`weight` (out, in), float32 on a CPU, copied once into oneDNN's packed layout for products of a few rows
    (an opaque "mkldnn" tensor: only `linear` reads it)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), PACK_ROWS)


def linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """x (..., in) times the packed weight transposed: (..., out), as F.linear(x, weight) computes it (the sums
    in another order: float32 rounding apart, the same numbers). No autograd: call it under no_grad."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")

"""Arithmetic intensity (FLOPs per byte) and the roofline's solvers: at what batch, or how many rows, a
decode step or one product stops being bound by memory and starts being bound by arithmetic.

Pure Python (no torch). A device's ridge point is its peak FLOP/s over its
bandwidth; a step whose intensity is below it waits on memory. The weights are
read once per step however many sequences share it, while FLOPs grow with the
batch, so a step's intensity grows about linearly in the batch size until the
KV cache (read once per sequence) takes over the bytes.
"""

from __future__ import annotations

import math

from ..config import ModelConfig, get_config
from .passes import _check, decode_bytes, decode_flops, decode_parts, estimate_2n


FLOP_FORMS = ("exact", "2n")


def decode_intensity(cfg: "ModelConfig | str", context: int, batch: int = 1, bytes_per_param: int = 2,
                     kv_bytes_per_element: int | None = None, activations: bool = False,
                     flops: str = "exact") -> float:
    """FLOPs per byte moved by one decode step (`decode_flops` / `decode_bytes`, same arguments).

    flops="exact" counts the matmuls that run plus attention: with 2-byte weights
    that is 1 FLOP per weight byte per sequence. flops="2n" replaces the matmuls by
    the 2·N_params·batch estimate (attention still added), the widely quoted
    convention: it charges FLOPs for the embedding table, whose bytes are not
    counted, so for an untied model it comes out higher (Llama-3-8B: 1.07, not 1.00).
    """
    cfg = get_config(cfg)
    if flops not in FLOP_FORMS:
        raise ValueError(f"flops must be one of {FLOP_FORMS}, got {flops!r}.")
    f = decode_flops(cfg, context, batch)
    work = f.total if flops == "exact" else batch * estimate_2n(cfg) + f.attention
    return work / decode_bytes(cfg, context, batch, bytes_per_param, kv_bytes_per_element, activations).total


BOUND_PARTS = ("step", "weights")


def compute_bound_batch(cfg: "ModelConfig | str", ridge: float, context: int, bytes_per_param: int = 2,
                        kv_bytes_per_element: int | None = None, flops: str = "exact",
                        part: str = "step") -> int | None:
    """Smallest batch whose decode step reaches `ridge` FLOPs per byte, or None if no batch does.

    part="step": the whole step's intensity. Its FLOPs are batch·f (f per
    sequence) and its bytes W + batch·k (weights W once, KV cache k per
    sequence), so the intensity batch·f / (W + batch·k) rises towards f / k but
    never past it: if f / k <= ridge, the step as a whole stays below the ridge at
    any batch. Otherwise the answer is the first integer batch >= ridge·W / (f − ridge·k).
    part="weights": the weight products alone (`decode_parts`), whose intensity
    batch·f_w / W grows without limit: they reach the ridge at batch ridge·W / f_w,
    whatever the context, while attention never does.
    """
    cfg = get_config(cfg)
    if not ridge > 0:
        raise ValueError(f"ridge must be a positive number of FLOPs per byte, got {ridge!r}.")
    if flops not in FLOP_FORMS:
        raise ValueError(f"flops must be one of {FLOP_FORMS}, got {flops!r}.")
    if part not in BOUND_PARTS:
        raise ValueError(f"part must be one of {BOUND_PARTS}, got {part!r}.")
    if part == "weights":
        w = decode_parts(cfg, context, 1, bytes_per_param, kv_bytes_per_element)["weights"]
        return _first_reaching(lambda b: b * w.flops >= ridge * w.bytes, math.ceil(ridge * w.bytes / w.flops))
    one = decode_flops(cfg, context, 1)
    f = one.total if flops == "exact" else estimate_2n(cfg) + one.attention
    by = decode_bytes(cfg, context, 1, bytes_per_param, kv_bytes_per_element)
    k, w = by.kv, by.total - by.kv
    if f <= ridge * k:
        return None
    return _first_reaching(
        lambda b: decode_intensity(cfg, context, b, bytes_per_param, kv_bytes_per_element, flops=flops) >= ridge,
        math.ceil(ridge * w / (f - ridge * k)))


def matmul_intensity(rows: int, k: int, n: int, bytes_per_element: int = 2) -> float:
    """FLOPs per byte of one product (rows, k) @ (k, n): 2·rows·k·n FLOPs over the bytes of the input,
    the weight matrix and the output, each moved once.

    With one row it is about 1 FLOP per 2-byte weight; it grows with the rows, since
    the weight matrix is read once however many rows share it, until the
    activations' own bytes (rows·k + rows·n) catch up with the weights' k·n.
    """
    _check(rows=rows, k=k, n=n, bytes_per_element=bytes_per_element)
    return 2 * rows * k * n / (bytes_per_element * (k * n + rows * k + rows * n))


def compute_bound_rows(k: int, n: int, ridge: float, bytes_per_element: int = 2) -> int | None:
    """Fewest rows at which a (rows, k) @ (k, n) product reaches `ridge` FLOPs per byte, or None if none does.

    Solving 2·r·k·n ≥ ridge·b·(k·n + r·k + r·n) for r: r ≥ ridge·b·k·n / (2·k·n − ridge·b·(k + n)).
    The intensity never exceeds 2·k·n / (b·(k + n)), so a ridge at or above that is never reached.
    """
    _check(k=k, n=n, bytes_per_element=bytes_per_element)
    if not ridge > 0:
        raise ValueError(f"ridge must be a positive number of FLOPs per byte, got {ridge!r}.")
    b = bytes_per_element
    room = 2 * k * n - ridge * b * (k + n)
    if room <= 0:
        return None
    return _first_reaching(lambda r: matmul_intensity(r, k, n, b) >= ridge, math.ceil(ridge * b * k * n / room))


def _first_reaching(reaches, guess: int) -> int:
    """The smallest integer x >= 1 for which reaches(x) holds (it holds for every larger x too).

    `guess` is the closed-form answer; floating-point rounding may have put it one
    off, so the search steps down and up from there to the exact integer.
    """
    x = max(1, guess)
    while x > 1 and reaches(x - 1):
        x -= 1
    while not reaches(x):
        x += 1
    return x

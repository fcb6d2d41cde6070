"""Chapter 4's experiments: each takes the chapter's `Setup` (or what an earlier one measured) and returns a
record of `records`.

- `check_agreement`: greedy generation by both loops in float32, token for token and logit for logit.
- `time_steps`: one step of each loop, timed in turns at the sizes' sequence lengths.
- `count_generation_flops`: PyTorch's FLOP counter over a short generation of each loop, and the cost model's.
- `whole_generation`: both loops over a whole generation, timed, counted, and put through this machine's
  roofline (`hardware.probe`).
- `quoted_table`, `naive_crossovers`, `exercise_numbers`: cost-model arithmetic only, nothing run
  (`quoted_table` also reads the committed GPU reference's matmul probe).

Every roofline time counts a full pass's attention as the kernel on that device computes it
(`attention.counted_passes`, "tiled"); the cost model's totals count the full S×S square, as FlopCounterMode does.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import torch

from ... import cost, hardware
from ...device import dtype_name
from ...generation import generate, greedy_logits
from ...profiling import count_flops, forward_fn
from ...timing import time_calls, time_in_turns
from ..setup import Setup, float32_model, random_prompt
from .attention import attention_total, causal_crossover, counted_passes
from .claims import formula_side
from .records import (Agreement, CrossoverCurve, Crossovers, FlopCheck, Generation, GpuShare, LoopRun, QuotedLoop,
                      QuotedTable, StepSweep)

LOOPS = (("naive", False), ("cached", True))  # (name, cache=)


def check_agreement(s: Setup, prompt: str = "The three primary colours are") -> Agreement:
    """Generate `s.sizes.naive_new_tokens` tokens greedily after `prompt` with both loops and compare every
    step's logits. Runs in float32 whatever `s.dtype` is (a float32 copy of the model, if needed): in a
    2-byte format the loops add the same numbers in different orders, and a rounding difference can tip a
    near-tie between two tokens."""
    check_model = float32_model(s.model)
    ids = s.tokenizer.encode(prompt)
    n = s.sizes.naive_new_tokens
    cached_ids, cached_logits = greedy_logits(check_model, ids, n, cache=True)  # (n,), (n, vocab)
    naive_ids, naive_logits = greedy_logits(check_model, ids, n, cache=False)
    gap = float((cached_logits - naive_logits).abs().max())
    return Agreement(prompt, cached_ids.tolist(), naive_ids.tolist(), gap, s.tokenizer.decode(cached_ids.tolist()))


def time_steps(s: Setup) -> StepSweep:
    """Time one step of each loop at every length S of `s.sizes.naive_positions`, in turns
    (`time_in_turns`, `s.sizes.repeat` rounds): naive, a full pass over S tokens keeping the last logits;
    cached, one token after S cached positions. Keeps the fastest round of each."""
    positions = list(s.sizes.naive_positions)
    steps = {("naive", S): forward_fn(s.model, new_tokens=S) for S in positions}
    steps.update({("cached", S): forward_fn(s.model, context=S) for S in positions})
    timings = time_in_turns(steps, rounds=s.sizes.repeat, device=s.device, desc="one step of each loop")
    return StepSweep(s.model.cfg.name, s.device.type, dtype_name(s.dtype), positions,
                     [float(timings["naive", S].min) for S in positions],
                     [float(timings["cached", S].min) for S in positions])


def count_generation_flops(s: Setup, prompt: int = 8, new_tokens: int = 4) -> FlopCheck:
    """Count, with PyTorch's FlopCounterMode, the FLOPs of generating `new_tokens` after `prompt` random tokens
    with each loop, beside `cost.generation_cost`'s exact count of the same generation."""
    ids = random_prompt(s.model.cfg.vocab_size, prompt, seed=0)
    counted, predicted = {}, {}
    for name, cached in LOOPS:
        with count_flops() as counter:
            generate(s.model, ids, new_tokens, cache=cached)
        counted[name] = int(counter.get_total_flops())
        predicted[name] = cost.generation_cost(s.model.cfg, prompt, new_tokens, cached=cached).flops
    return FlopCheck(prompt, new_tokens, counted, predicted)


def whole_generation(s: Setup, new_tokens: int | None = None, here: hardware.Accelerator | None = None,
                     repeat: int = 2) -> Generation:
    """Generate `new_tokens` (default `s.sizes.naive_new_tokens`) tokens after a random
    `s.sizes.naive_prompt`-token prompt with each loop: the cost model's totals, the roofline time of its
    passes on `here` (default: `hardware.probe` of this device in `s.dtype`; attention as this device's kernel
    computes it), and the fastest of `repeat` timed runs after one warm-up."""
    cfg, P = s.model.cfg, s.sizes.naive_prompt
    n = s.sizes.naive_new_tokens if new_tokens is None else new_tokens
    bpp = s.dtype.itemsize
    here = hardware.probe(s.device, s.dtype) if here is None else here
    prompt = random_prompt(cfg.vocab_size, P, seed=1)
    runs = {}
    for name, cached in LOOPS:
        passes = counted_passes(cfg, P, n, cached, "tiled", s.device.type, bpp)
        causal = counted_passes(cfg, P, n, cached, "causal", s.device.type, bpp)
        timing = time_calls(lambda: generate(s.model, prompt, n, cache=cached), warmup=1, repeat=repeat,
                            device=s.device)
        runs[name] = LoopRun(cost.generation_cost(cfg, P, n, cached=cached, bytes_per_param=bpp),
                             hardware.roofline_time_of_passes(passes, here), float(timing.min),
                             attention_total(passes), attention_total(causal))
    return Generation(cfg.name, s.device.type, dtype_name(s.dtype), P, n, bpp, here, runs["naive"], runs["cached"])


def quoted_table(here: hardware.Accelerator, device: str = "cpu", prompt: int = 512, new_tokens: int = 512,
                 where=None) -> QuotedTable:
    """Llama-3-8B, `prompt` + `new_tokens`, 2-byte weights: each loop's totals by the back-of-envelope
    conventions (2·N per position, the full S×S square) and exact, its attention counted causal and as
    FlashAttention-2's tiles compute it, and its roofline time on an H100 SXM (those tiles) and on `here`, a
    `device` ("cpu", "cuda", ...), at its measured bfloat16 matmul rate (the 2-byte rate;
    `here.measured["matmul_bfloat16"]`), attention as that device's kernel computes it. Also the H100's ratio of
    the two loops with its peak lowered to the share of it that the newest committed GPU reference's bfloat16
    matmul probe reached (`where`: the references' folder, default the repository's)."""
    from ..prefill.counts import measured_gpu  # the newest GPU reference's probes, and its table row

    llama = cost.get_config("llama-3-8b")
    h100 = hardware.ACCELERATORS["H100 SXM"]
    here_2byte = dataclasses.replace(here, flops=here.measured["matmul_bfloat16"])
    probes, gpu = measured_gpu(where)
    efficiency = probes.values["matmul_bfloat16"] / gpu.flops
    h100_real = dataclasses.replace(h100, flops=efficiency * h100.flops)
    loops, real = {}, {}
    for name, cached in LOOPS:
        on_gpu = counted_passes(llama, prompt, new_tokens, cached, "tiled", "cuda")
        on_here = counted_passes(llama, prompt, new_tokens, cached, "tiled", device)
        full = cost.generation_passes(llama, prompt, new_tokens, cached=cached)
        loops[name] = QuotedLoop(cost.generation_cost(llama, prompt, new_tokens, cached=cached, form="estimate"),
                                 cost.generation_cost(llama, prompt, new_tokens, cached=cached),
                                 attention_total(counted_passes(llama, prompt, new_tokens, cached, "causal")),
                                 attention_total(on_gpu), hardware.roofline_time_of_passes(on_gpu, h100),
                                 hardware.roofline_time_of_passes(on_here, here_2byte),
                                 hardware.roofline_time_of_passes(full, h100))
        real[name] = hardware.roofline_time_of_passes(on_gpu, h100_real)
    return QuotedTable(llama.name, prompt, new_tokens, here_2byte.ridge, h100.ridge, loops["naive"], loops["cached"],
                       GpuShare(probes.label, probes.device_name, gpu.flops == h100.flops, efficiency,
                                real["naive"] / real["cached"]))


def naive_sums(cfg, new_tokens: int) -> tuple[int, int]:
    """A naive generation of `new_tokens` from a one-token prompt, summed over its passes 1..n in closed form:
    (weight products, causal attention) FLOPs. The products are body·n(n+1)/2 + head·n (the LM head for the
    last position of each pass), attention 4·q_dim·L·n(n+1)(n+2)/6 (pass S scores S(S+1)/2 pairs)."""
    per_position = cost.matmul_flops(cfg, 1)
    head = per_position.pop("lm_head")
    body, n = sum(per_position.values()), new_tokens
    return body * n * (n + 1) // 2 + head * n, 4 * cfg.q_dim * cfg.n_layers * n * (n + 1) * (n + 2) // 6


def naive_crossovers(models: tuple[str, ...] = ("llama-3-8b", "smollm2-135m"), points: int = 25) -> Crossovers:
    """For each model, a naive generation's summed weight products and causal attention FLOPs from a one-token
    prompt (`naive_sums`) at about `points` lengths from 16 to 3× `attention.causal_crossover`, spaced
    geometrically: a thought experiment past the model's context window. Also the length at which the full
    S×S square would cross (`cost.naive_attention_crossover`)."""
    curves = []
    for model in models:
        cfg = cost.get_config(model)
        cross = causal_crossover(cfg)
        ns = [int(n) for n in np.unique(np.geomspace(16, 3 * cross, points).astype(int))]
        sums = [naive_sums(cfg, n) for n in ns]
        curves.append(CrossoverCurve(cfg.name, cross, cfg.max_seq_len, ns, [m for m, _ in sums],
                                     [a for _, a in sums], cost.naive_attention_crossover(cfg)))
    return Crossovers(curves)


def ratio_formula(prompt: int, new_tokens: int) -> float:
    """The naive ÷ cached FLOPs of the weight products alone, LM head and attention left out: the naive loop's
    passes cover prompt ... prompt + n − 1 positions, n·(P + (n − 1)/2) in all, the cached loop's P + n − 1."""
    P, n = prompt, new_tokens
    return n * (P + (n - 1) / 2) / (P + n - 1)


def score_bytes(cfg, seq_len: int, bytes_per_element: int = 2) -> int:
    """Bytes an unfused ("math") attention moves for the score matrices of a pass over `seq_len` tokens: the
    S×S scores of every head in every layer written once and read once. A fused kernel (FlashAttention) keeps
    them on chip and moves none of them."""
    return 2 * cfg.n_heads * cfg.n_layers * seq_len * seq_len * bytes_per_element


def exercise_numbers(generation: Generation, cfg, prompt: int = 512,
                     new_tokens: tuple[int, int, int] = (128, 2048, 7680),
                     pass_lengths: tuple[int, int] = (512, 8192)) -> dict[str, object]:
    """The exercises' answers. Llama-3-8B's naive ÷ cached FLOPs after a `prompt`-token prompt for each of
    `new_tokens` (the last up to the model's context), exact (the full S×S square, as `cost.generation_cost`)
    and by `ratio_formula`; the bytes of a naive pass's activations against its weights (2-byte,
    `cost.decode_bytes(activations=True)` per row) and its unfused score matrices (`score_bytes`), the pass's
    intensity with the activations counted and with the scores too, at `pass_lengths`, and the length past which
    the scores bring it below an H100's ridge (its limit: head_dim FLOP/byte); and this machine's roofline ratio
    of the two loops (as in `generation`, whose model's config is `cfg`) for twice its new tokens."""
    llama = cost.get_config("llama-3-8b")
    ridge = hardware.ACCELERATORS["H100 SXM"].ridge
    n1, n2, n3 = new_tokens

    def flop_ratio(n):
        return cost.generation_cost(llama, prompt, n, cached=False).flops / cost.generation_cost(llama, prompt, n).flops

    weights = cost.decode_bytes(llama, 1).weights
    per_row = cost.decode_bytes(llama, 1, activations=True).part("activations")  # each product's input and output

    def pass_intensity(S, scores=False):  # a naive pass over S tokens, its activations' (and scores') bytes counted
        moved = weights + S * per_row + (score_bytes(llama, S) if scores else 0)
        return cost.prefill_flops(llama, S, attention="full", logits_for=1).total / moved

    lo, hi = pass_lengths[0], pass_lengths[0]
    while pass_intensity(hi, scores=True) >= ridge:  # the intensity rises, peaks, then falls toward head_dim
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # the first S, past the peak, whose unfused pass sits below the ridge
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if pass_intensity(mid, scores=True) >= ridge else (lo, mid)

    P, n_double = generation.prompt, 2 * generation.new_tokens
    naive_double, cached_double = (hardware.roofline_time_of_passes(
        counted_passes(cfg, P, n_double, cached, "tiled", generation.device, generation.bytes_per_param),
        generation.here) for _, cached in LOOPS)
    s1, s2 = pass_lengths
    return {"ex_p": prompt, "ex_n1": n1, "ex_n2": n2, "ex_n3": n3, "ex_r1": flop_ratio(n1), "ex_r2": flop_ratio(n2),
            "ex_r3": flop_ratio(n3), "ex_f1": ratio_formula(prompt, n1), "ex_f2": ratio_formula(prompt, n2),
            "ex_f3": ratio_formula(prompt, n3),
            "ex_side_text": formula_side([flop_ratio(n) for n in new_tokens],
                                         [ratio_formula(prompt, n) for n in new_tokens]),
            "ex_act_row_mb": per_row / 1e6, "ex_w_gb": weights / 1e9, "ex_act_eq": weights / per_row,
            "ex_s1": s1, "ex_s2": s2, "ex_int_s1": pass_intensity(s1), "ex_int_s2": pass_intensity(s2),
            "ex_sc_s1_gb": score_bytes(llama, s1) / 1e9, "ex_sc_s2_gb": score_bytes(llama, s2) / 1e9,
            "ex_int_sc_s1": pass_intensity(s1, scores=True), "ex_int_sc_s2": pass_intensity(s2, scores=True),
            "ex_sc_cross": hi, "ex_head_dim": llama.head_dim, "ex_window": llama.max_seq_len,
            "ex_ridge": ridge,
            "ex_n_double": n_double, "ex_pred_double": naive_double / cached_double,
            "ex_pred_now": generation.pred_ratio}

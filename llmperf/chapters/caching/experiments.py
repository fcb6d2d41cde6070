"""Chapter 4's experiments: each takes the chapter's `Setup` (or what an earlier one measured) and returns a
record of `records`.

- `check_agreement`: greedy generation by both loops in float32, token for token and logit for logit.
- `time_steps`: one step of each loop, timed in turns at the sizes' sequence lengths.
- `count_generation_flops`: PyTorch's FLOP counter over a short generation of each loop, and the cost model's.
- `whole_generation`: both loops over a whole generation, timed, counted, and put through this machine's
  roofline (`hardware.probe`).
- `quoted_table`, `naive_crossovers`, `exercise_numbers`: cost-model arithmetic only, nothing run
  (`quoted_table` also reads the committed GPU reference's matmul probe).
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
from ...timing import bench, bench_interleaved
from ..setup import Setup, random_prompt
from .claims import formula_side
from .records import (Agreement, CrossoverCurve, Crossovers, FlopCheck, Generation, GpuShare, LoopRun, QuotedLoop,
                      QuotedTable, StepSweep)

LOOPS = (("naive", False), ("cached", True))  # (name, cache=)


def check_agreement(s: Setup, prompt: str = "The three primary colours are") -> Agreement:
    """Generate `s.sizes.naive_new_tokens` tokens greedily after `prompt` with both loops and compare every
    step's logits. Runs in float32 whatever `s.dtype` is (a float32 copy of the model, if needed): in a
    2-byte format the loops add the same numbers in different orders, and a rounding difference can tip a
    near-tie between two tokens."""
    check_model = s.model if s.dtype == torch.float32 else copy.deepcopy(s.model).float()
    ids = s.tokenizer.encode(prompt)
    n = s.sizes.naive_new_tokens
    cached_ids, cached_logits = greedy_logits(check_model, ids, n, cache=True)  # (n,), (n, vocab)
    naive_ids, naive_logits = greedy_logits(check_model, ids, n, cache=False)
    gap = float((cached_logits - naive_logits).abs().max())
    return Agreement(prompt, cached_ids.tolist(), naive_ids.tolist(), gap, s.tokenizer.decode(cached_ids.tolist()))


def time_steps(s: Setup) -> StepSweep:
    """Time one step of each loop at every length S of `s.sizes.naive_positions`, in turns
    (`bench_interleaved`, `s.sizes.repeat` rounds): naive, a full pass over S tokens keeping the last logits;
    cached, one token after S cached positions. Keeps the fastest round of each."""
    positions = list(s.sizes.naive_positions)
    steps = {("naive", S): forward_fn(s.model, new_tokens=S) for S in positions}
    steps.update({("cached", S): forward_fn(s.model, context=S) for S in positions})
    timings = bench_interleaved(steps, rounds=s.sizes.repeat, device=s.device, desc="one step of each loop")
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
    passes on `here` (default: `hardware.probe` of this device in `s.dtype`), and the fastest of `repeat`
    timed runs after one warm-up."""
    cfg, P = s.model.cfg, s.sizes.naive_prompt
    n = s.sizes.naive_new_tokens if new_tokens is None else new_tokens
    bpp = s.dtype.itemsize
    here = hardware.probe(s.device, s.dtype) if here is None else here
    prompt = random_prompt(cfg.vocab_size, P, seed=1)
    runs = {}
    for name, cached in LOOPS:
        passes = cost.generation_passes(cfg, P, n, cached, bytes_per_param=bpp)
        timing = bench(lambda: generate(s.model, prompt, n, cache=cached), warmup=1, repeat=repeat, device=s.device)
        runs[name] = LoopRun(cost.generation_cost(cfg, P, n, cached=cached, bytes_per_param=bpp),
                             hardware.roofline_time_of_passes(passes, here), float(timing.min))
    return Generation(cfg.name, s.device.type, dtype_name(s.dtype), P, n, bpp, here, runs["naive"], runs["cached"])


def quoted_table(here: hardware.Accelerator, prompt: int = 512, new_tokens: int = 512, where=None) -> QuotedTable:
    """Llama-3-8B, `prompt` + `new_tokens`, 2-byte weights: each loop's totals in the source notes' conventions
    (2·N per position, full attention) and exact, and its roofline time on an H100 SXM and on `here` at its
    measured bfloat16 matmul rate (the 2-byte rate; `here.measured["matmul_bfloat16"]`). Also the H100's ratio
    of the two loops with its peak lowered to the share of it that the newest committed GPU reference's
    bfloat16 matmul probe reached (`where`: the references' folder, default the repository's)."""
    from ..prefill.counts import measured_gpu  # the newest GPU reference's probes, and its table row

    llama = cost.get_config("llama-3-8b")
    h100 = hardware.ACCELERATORS["H100 SXM"]
    here_2byte = dataclasses.replace(here, flops=here.measured["matmul_bfloat16"])
    probes, gpu = measured_gpu(where)
    efficiency = probes.values["matmul_bfloat16"] / gpu.flops
    h100_real = dataclasses.replace(h100, flops=efficiency * h100.flops)
    loops, real = {}, {}
    for name, cached in LOOPS:
        passes = cost.generation_passes(llama, prompt, new_tokens, cached=cached)
        loops[name] = QuotedLoop(cost.generation_cost(llama, prompt, new_tokens, cached=cached, form="estimate"),
                                 cost.generation_cost(llama, prompt, new_tokens, cached=cached),
                                 hardware.roofline_time_of_passes(passes, h100),
                                 hardware.roofline_time_of_passes(passes, here_2byte))
        real[name] = hardware.roofline_time_of_passes(passes, h100_real)
    return QuotedTable(llama.name, prompt, new_tokens, here_2byte.ridge, h100.ridge, loops["naive"], loops["cached"],
                       GpuShare(probes.label, probes.device_name, gpu.flops == h100.flops, efficiency,
                                real["naive"] / real["cached"]))


def naive_crossovers(models: tuple[str, ...] = ("llama-3-8b", "smollm2-135m"), points: int = 25) -> Crossovers:
    """For each model, a naive generation's summed matmul and attention FLOPs from a one-token prompt at about
    `points` lengths from 16 to 3× `cost.naive_attention_crossover`, spaced geometrically. The context limit
    is lifted to 4× the crossover: a thought experiment past the model's context window."""
    curves = []
    for model in models:
        cfg = cost.get_config(model)
        cross = cost.naive_attention_crossover(cfg)
        roomy = cfg.with_(max_seq_len=4 * cross)
        ns = [int(n) for n in np.unique(np.geomspace(16, 3 * cross, points).astype(int))]
        totals = [cost.generation_cost(roomy, 1, n, cached=False) for n in ns]
        curves.append(CrossoverCurve(cfg.name, cross, cfg.max_seq_len, ns, [t.matmul_flops for t in totals],
                                     [t.attention_flops for t in totals]))
    return Crossovers(curves)


def ratio_formula(prompt: int, new_tokens: int) -> float:
    """The naive ÷ cached FLOPs of the weight products alone, LM head and attention left out: the naive loop's
    passes cover prompt ... prompt + n − 1 positions, n·(P + (n − 1)/2) in all, the cached loop's P + n − 1."""
    P, n = prompt, new_tokens
    return n * (P + (n - 1) / 2) / (P + n - 1)


def exercise_numbers(generation: Generation, cfg, prompt: int = 512,
                     new_tokens: tuple[int, int, int] = (128, 2048, 7680), pass_lengths: tuple[int, int] = (512, 8192)) -> dict[str, object]:
    """The exercises' answers. Llama-3-8B's naive ÷ cached FLOPs after a `prompt`-token prompt for each of
    `new_tokens` (the last up to the model's context), exact and by `ratio_formula`; the bytes of a naive pass's
    activations against its weights (2-byte, `cost.decode_bytes(activations=True)` per row) and the pass's
    intensity with them counted, at `pass_lengths`; and this machine's roofline ratio of the two loops (as in
    `generation`, whose model's config is `cfg`) for twice its new tokens."""
    llama = cost.get_config("llama-3-8b")
    n1, n2, n3 = new_tokens

    def flop_ratio(n):
        return cost.generation_cost(llama, prompt, n, cached=False).flops / cost.generation_cost(llama, prompt, n).flops

    weights = cost.decode_bytes(llama, 1).weights
    per_row = cost.decode_bytes(llama, 1, activations=True).part("activations")  # each product's input and output

    def pass_intensity(S):  # a naive pass over S tokens, its activations' bytes counted
        return cost.prefill_flops(llama, S, attention="full", logits_for=1).total / (weights + S * per_row)

    P, n_double = generation.prompt, 2 * generation.new_tokens
    naive_double, cached_double = (hardware.roofline_time_of_passes(
        cost.generation_passes(cfg, P, n_double, cached, bytes_per_param=generation.bytes_per_param), generation.here)
        for _, cached in LOOPS)
    s1, s2 = pass_lengths
    return {"ex_p": prompt, "ex_n1": n1, "ex_n2": n2, "ex_n3": n3, "ex_r1": flop_ratio(n1), "ex_r2": flop_ratio(n2),
            "ex_r3": flop_ratio(n3), "ex_f1": ratio_formula(prompt, n1), "ex_f2": ratio_formula(prompt, n2),
            "ex_f3": ratio_formula(prompt, n3),
            "ex_side_text": formula_side([flop_ratio(n) for n in new_tokens],
                                         [ratio_formula(prompt, n) for n in new_tokens]),
            "ex_act_row_mb": per_row / 1e6, "ex_w_gb": weights / 1e9, "ex_act_eq": weights / per_row,
            "ex_s1": s1, "ex_s2": s2, "ex_int_s1": pass_intensity(s1), "ex_int_s2": pass_intensity(s2),
            "ex_ridge": hardware.ACCELERATORS["H100 SXM"].ridge,
            "ex_n_double": n_double, "ex_pred_double": naive_double / cached_double,
            "ex_pred_now": generation.pred_ratio}

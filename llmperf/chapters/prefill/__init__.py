"""Chapter 2, prefill cost: its experiments, their result records, and the sentences chosen from them.

    counts   the FLOPs: `estimates` (the cost model on Llama-3-8B and on the setup's model, arithmetic only),
             `count_check` (PyTorch's FLOP counter against the cost model, and what it counts for the
             fused attention kernel) and `exercise_numbers`
    timings  the clock: `model_for` (the model each experiment times), `ttft_sweep` (TTFT over prompt lengths,
             against the FLOPs at a probed matmul rate) and `batch_prefill` (batch 1 against batch B)
    claims   the sentences chosen from the numbers; pure Python

Each experiment takes the chapter's setup (`chapters.setup.setup()`) and returns a record with `numbers()` (what
the prose glues), `table()` and `check()` (what the chapter's last cell asserts). The figures are in
`llmperf.plots.prefill`.
"""

from .claims import (batch_gain_text, batch_model_text, batch_ttft_text, doubling_text, gap_text, growth_exponent,
                     intercept_text, quadratic_part, sdpa_count_text, share_of_probe, sweep_model_text)
from .counts import (CountedRow, CountRow, Estimates, FlopCheck, KernelCount, count_check, estimates,
                     exercise_numbers, weight_products)
from .timings import BatchedPrefill, TTFTSweep, batch_prefill, model_for, ttft_sweep

__all__ = ["BatchedPrefill", "CountRow", "CountedRow", "Estimates", "FlopCheck", "KernelCount", "TTFTSweep",
           "batch_gain_text", "batch_model_text", "batch_prefill", "batch_ttft_text", "count_check", "doubling_text",
           "estimates", "exercise_numbers", "gap_text", "growth_exponent", "intercept_text", "model_for",
           "quadratic_part", "sdpa_count_text", "share_of_probe", "sweep_model_text", "ttft_sweep",
           "weight_products"]

"""Chapter 4, naive against cached generation: its experiments, their result records, and the sentences
chosen from them.

    experiments  the functions the notebook calls, each returning a record (check_agreement, time_steps,
                 count_generation_flops, whole_generation; quoted_table, naive_crossovers and
                 exercise_numbers are cost-model arithmetic only)
    records      the records: fields, numbers() for the prose, table(), check() for the last cell (the 512 + 512
                 table's in quoted)
    waste        what the naive loop wastes, by arithmetic alone: each loop's seconds of arithmetic and of
                 streaming on a device (wastes -> Wastes)
    batching     one step of B sequences with the cache and without it: step_parts (the cost model),
                 predicted_batch_steps (Llama-3-8B on an H100) and batch_steps (timed here) -> BatchSteps
    attention    a full pass's attention counted three ways (the full S×S square, causal, as a fused kernel's
                 tiles compute it) and whole generations priced with the count that runs; pure Python
    kernels      the attention kernel timed told is_causal and unmasked, against its tiles (time_causal ->
                 CausalTiming)
    claims       the sentences chosen from the numbers; pure Python
"""

from .attention import (COUNTS, attention_total, causal_crossover, counted_passes, kernel_tiles,
                        pass_attention_flops, tiled_pairs)
from .batching import BatchSteps, batch_steps, predicted_batch_steps, step_parts
from .claims import (batch_gain, causal_timing, crossover_window, dominant_waste, formula_side, gap_by_device, gpu_cores,
                     kernel_count, naive_gap, step_slopes)
from .experiments import (check_agreement, count_generation_flops, exercise_numbers, float32_model, naive_crossovers,
                          naive_sums, quoted_table, score_bytes, time_steps, whole_generation)
from .kernels import CausalTiming, time_causal
from .records import (Agreement, CrossoverCurve, Crossovers, FlopCheck, Generation, GpuShare, LoopRun, QuotedLoop,
                      QuotedTable, StepSweep)
from .waste import LoopAccount, WasteAccount, Wastes, loop_account, waste_account, wastes

__all__ = ["CausalTiming", "causal_timing", "time_causal", "COUNTS", "attention_total", "causal_crossover", "counted_passes", "float32_model", "kernel_count",
           "kernel_tiles", "naive_sums", "pass_attention_flops", "score_bytes", "tiled_pairs",
           "Agreement", "BatchSteps", "CrossoverCurve", "Crossovers", "FlopCheck", "Generation", "GpuShare",
           "LoopAccount", "LoopRun", "QuotedLoop", "QuotedTable", "StepSweep", "WasteAccount", "Wastes",
           "batch_gain", "batch_steps", "check_agreement", "count_generation_flops", "crossover_window",
           "dominant_waste",
           "exercise_numbers", "formula_side", "gap_by_device", "gpu_cores", "loop_account", "naive_crossovers",
           "naive_gap", "step_slopes",
           "predicted_batch_steps", "quoted_table", "step_parts", "time_steps", "waste_account", "wastes",
           "whole_generation"]

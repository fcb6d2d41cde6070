"""Chapter 3, decode intensity and the roofline: its experiments, result records and sentences.

What is where:

    counts    by arithmetic alone (`llmperf.cost`): a Llama-3-8B decode step whole and op by op
              (`llama_counts` -> LlamaCounts), Llama-3-8B's latency against throughput on an H100
              (`latency_throughput` -> LatencyThroughput), the exercises' answers (`exercise_numbers`)
    roofs     this machine probed beside the table's H100 and H200 (`roofline` -> Roofs), and the
              setup's numbers the prose names (`setup_numbers`)
    batching  SmolLM2's step across batch sizes, counted (`batch_counts` -> BatchCounts) and timed
              (`batch_sweep` -> BatchSweep); the plain model against `fast.fuse` (`gap_to_roof` -> Gap)
    context   the KV cache against the weights (`kv_growth` -> KvGrowth), and the step timed across
              context lengths (`context_sweep` -> ContextSweep)
    claims    the sentences chosen from the records' numbers

Each record's `numbers()` is what the chapter glues, `table()` what it shows, `check()` what its last cell
asserts; the figures are in `llmperf.plots.intensity`.
"""

from .batching import BatchCounts, BatchSweep, Gap, batch_counts, batch_sweep, gap_to_roof, kv_equals_weights_at
from .claims import (against_roof, attention_bound, batch_fixed_cost, batch_trade, bytes_growth, context_mismatch,
                     fused_result, gptfast_beside, launches_vs_bytes, low_precision_ridge, per_user_speed, probe_gap, small_batch_kernel,
                     tuned_code, weights_bound)
from .context import ContextSweep, KvGrowth, context_sweep, kv_growth
from .counts import (LatencyThroughput, LlamaCounts, OpGroup, exercise_numbers, gptfast_pct, latency_throughput,
                     llama_counts, middle_batch)
from .roofs import Roofs, roofline, setup_numbers

__all__ = [
    "BatchCounts", "BatchSweep", "Gap", "batch_counts", "batch_sweep", "gap_to_roof", "kv_equals_weights_at",
    "against_roof", "attention_bound", "batch_fixed_cost", "batch_trade", "bytes_growth", "context_mismatch",
    "fused_result", "gptfast_beside", "launches_vs_bytes", "low_precision_ridge", "per_user_speed", "probe_gap", "small_batch_kernel",
    "tuned_code", "weights_bound",
    "ContextSweep", "KvGrowth", "context_sweep", "kv_growth",
    "LatencyThroughput", "LlamaCounts", "OpGroup", "exercise_numbers", "gptfast_pct", "latency_throughput",
    "llama_counts", "middle_batch", "Roofs", "roofline", "setup_numbers",
]

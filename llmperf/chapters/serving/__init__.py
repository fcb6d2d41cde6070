"""Chapter 6, serving metrics on a real server: its experiments, their records, and the sentences chosen
from them.

Every served experiment starts the course's server (`llmperf.serve`) in this process on a free port of
127.0.0.1, loads it with the load generator (`llmperf.bench`), and returns a record holding each request's
timestamps and the server's polled count of requests in flight; the metrics are derived from them
(`llmperf.metrics`). What is where:

    served   what the served runs share: the model's name, the requests' lengths, sending a watched load
    run      `closed_run`: one closed-loop run (four numbers, E2E identity, TPOT against ITL, Little's Law)
    sweep    `batch_sweep`: the exchange rate over max batch sizes, MLPerf's limits, goodput, warm-up
    loops    `stall_loops`: closed against open loop around one long prefill; percentiles and their spread
    sums     no measurement: `kv_capacity` (Little's Law sizing a KV cache), `claim_check` (15,000 tokens/s
             at batch 256), `exercise_numbers`
    claims   the sentences, chosen from the numbers

Each record's `numbers()` is what the chapter's prose glues, `table()` what it shows, and `check()` what its
last cell asserts. The figures are `llmperf.plots.serving`.
"""

from .claims import goodput_peak, itl_against_tpot, limits_met, omission, percentile_spread, warm_up
from .loops import Loop, Loops, stall_loops
from .run import Run, answer_table, closed_run
from .served import NAME, matching_seed, request_lengths
from .sums import Claim, KVCapacity, claim_check, exercise_numbers, kv_capacity
from .sweep import MLPERF_LIMITS, BatchPoint, BatchSweep, batch_sweep

__all__ = ["NAME", "BatchPoint", "BatchSweep", "Claim", "KVCapacity", "Loop", "Loops", "MLPERF_LIMITS", "Run",
           "answer_table", "batch_sweep", "claim_check", "closed_run", "exercise_numbers", "goodput_peak",
           "itl_against_tpot", "kv_capacity", "limits_met", "matching_seed", "omission", "percentile_spread",
           "request_lengths", "stall_loops", "warm_up"]

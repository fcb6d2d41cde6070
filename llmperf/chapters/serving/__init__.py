"""Chapter 6, serving metrics on a real server: its experiments, their records, and the sentences chosen
from them.

Every served experiment starts the course's server (`llmperf.serve`) in this process on a free port of
127.0.0.1, loads it with the load generator (`llmperf.bench`), and returns a record holding each request's
timestamps and the server's count of requests in flight, read from its /metrics; the metrics are derived from them
(`llmperf.metrics`). What is where:

    served   what the served runs share: the model's name, the requests' lengths, sending a watched load
    run      `closed_run`: one closed-loop run (four numbers, E2E identity, TPOT against ITL, Little's Law);
             `lone_request`: one request alone on a server (the predict-then-measure exercise)
    sweep    `batch_sweep`: the exchange rate over max batch sizes, the prefills per step, MLPerf's limits,
             goodput, warm-up
    rates    `rate_sweep`: one server swept by rate (`bench.sweep`): capacity, knee, DistServe's goodput
    loops    `stall_loops`: closed against open loop (at `OPEN_LOAD` of the closed loop's throughput) around
             one long prefill; percentiles and their spread
    memory   `memory_runs`: one burst of requests at one KV budget, reserved, paged and overcommitted, served by
             the engine directly so that every step's memory is read; `budget` predicts it from the lengths
    turns    `turn_runs`: multi-turn conversations against the server, prefix caching off and on
    sums     no measurement: `kv_capacity` (Little's Law sizing a KV cache), `claim_check` (15,000 tokens/s
             at batch 256), `exercise_numbers`
    sources  no measurement: the cited tables, MLPerf's latency limits and each tool's names for the metrics
    claims   the sentences, chosen from the numbers (`cache_claims`: memory's and the turns')

Each record's `numbers()` is what the chapter's prose glues, `table()` what it shows, and `check()` what its
last cell asserts. The figures are `llmperf.plots.serving`.
"""

from . import budget, cache_claims, sources
from .claims import (distserve_goodput, goodput_peak, itl_against_tpot, knee_text, limits_met, long_prefill, omission,
                     percentile_spread, percentiles_add, prefill_bursts, residual_text, step_time_path,
                     throughput_path, user_against_server, warm_up)
from .loops import OPEN_LOAD, Loop, Loops, stall_loops
from .memory import Memory, MemoryRun, memory_runs, predictions as memory_predictions
from .rates import RateSweep, rate_sweep, share_sample_size
from .run import Run, answer_table, closed_run, lone_request, setup_numbers
from .served import NAME, matching_seed, request_lengths
from .sums import Claim, KVCapacity, claim_check, exercise_numbers, kv_capacity, published_share
from .sweep import MLPERF_LIMITS, BatchPoint, BatchSweep, batch_sweep, explore_view
from .turns import Turns, dialogue, turn_runs

__all__ = ["NAME", "OPEN_LOAD", "BatchPoint", "BatchSweep", "Claim", "KVCapacity", "Loop", "Loops", "MLPERF_LIMITS",
           "Memory", "MemoryRun", "RateSweep", "Turns", "budget", "cache_claims", "dialogue", "explore_view",
           "memory_predictions", "memory_runs", "turn_runs",
           "Run", "answer_table", "batch_sweep", "claim_check", "closed_run", "distserve_goodput",
           "exercise_numbers", "goodput_peak", "itl_against_tpot", "knee_text", "kv_capacity", "limits_met",
           "lone_request", "long_prefill", "matching_seed", "omission", "rate_sweep",
           "percentile_spread", "percentiles_add", "prefill_bursts", "published_share", "request_lengths",
           "residual_text", "setup_numbers", "share_sample_size", "sources", "stall_loops", "step_time_path",
           "throughput_path", "user_against_server", "warm_up"]

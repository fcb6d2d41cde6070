"""Chapter 3's records built by hand for its tests: this machine's probe, a batch sweep, a context sweep, the
roofs and the gap to the roof, and an H100's batch sweep predicted by the cost model (nothing is timed)."""

import dataclasses
import json

from llmperf import cost, hardware
from llmperf.chapters import intensity
from llmperf.chapters.setup import sizes_for_type

H100 = hardware.ACCELERATORS["H100 SXM"]
HERE = hardware.Accelerator("this machine (test)", flops=50e9, bandwidth=10e9, memory=16e9, source="by hand",
                            measured={"read_bandwidth": 10e9, "copy_bandwidth": 8e9, "matmul_float32": 50e9,
                                      "matmul_bfloat16": 5e9})


def as_json(record):
    return json.loads(json.dumps(dataclasses.asdict(record)))


def shown(table):
    """The DataFrame behind a table (a Styler or a DataFrame), and its HTML renders."""
    df = getattr(table, "data", table)
    assert table.to_html()
    return df


def gpu_batch_sweep() -> dict:
    """Chapter 3's batch sweep as an H100 would run it: SmolLM2 in bf16 at the CUDA sizes, predicted part by part."""
    sizes = sizes_for_type("cuda", free_memory=80e9)
    ctx, batches = sizes.decode_context, sizes.decode_batches
    step = [hardware.roofline_time_in_parts(cost.decode_parts("smollm2-135m", ctx + 1, b, 2), H100) for b in batches]
    nbytes = [cost.decode_bytes("smollm2-135m", ctx + 1, b, 2).total for b in batches]
    parts = cost.decode_parts("smollm2-135m", ctx + 1, 1, 2)
    return dict(ctx=ctx, batches=batches, step=step, nbytes=nbytes, parts=parts)


def sweep(step_s, roof_s=(1e-3, 1e-3, 1e-3), batches=(1, 2, 4)):
    return intensity.BatchSweep("cpu", 8, list(batches), list(step_s), [1000, 1100, 1200], [10, 20, 40], 1e6,
                                list(roof_s), 30.0)


def contexts(tpot_s, batch=1, contexts=(128, 2048), roof_s=(1e-3, 1e-3)):
    return intensity.ContextSweep("cpu", "float32", batch, list(contexts), list(tpot_s), [1000, 1500], [100, 600],
                                  list(roof_s), 1e6)


def contexts_at(rest_pct, kv_pct, bandwidth=1e6, nbytes=(1000, 1500)):
    """A context sweep whose shortest step read its bytes at `rest_pct` % of the probed bandwidth and whose added
    500 bytes were read at `kv_pct` % (None: the longer step took no longer)."""
    t0 = nbytes[0] / (bandwidth * rest_pct / 100)
    t1 = t0 + (nbytes[1] - nbytes[0]) / (bandwidth * kv_pct / 100) if kv_pct else 0.99 * t0
    return contexts([t0, t1])


def roofs(counts=None):
    """The roofs of chapter 3: this hand-built machine beside the table's H100 and H200, every table row's ridge."""
    counts = counts or intensity.llama_counts()
    return intensity.Roofs(HERE, "float32", H100, hardware.ACCELERATORS["H200 SXM"],
                           {n: hw.ridge for n, hw in hardware.ACCELERATORS.items()}, counts.flops_exact,
                           counts.step_bytes, counts.intensity_2n, counts.intensity_exact)


def gap():
    """A plain step of 2 ms against a fused one of 1.5 ms, 1 MB read on a 1 GB/s probe, on a CPU."""
    return intensity.Gap("cpu", 2e-3, 1.5e-3, 10**6, 1e9, 300, 2 * 10**5, H100.bandwidth, 1.3)

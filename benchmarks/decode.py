"""How close does a decode step get to the memory-bandwidth roof? Printed, never asserted.

Same machine, same run, same SmolLM2 weights, dtype and device: batch 1, a
128-token prompt, 128 new tokens, greedy, several repeats after a warm-up.

- llmperf's plain cached decode (the teaching model), llmperf's fused model
  (llmperf.fast), and transformers' own `generate` with its own KV cache:
  ms per token (time per output token: the gap between the first and the last
  token, over n - 1) and tokens/s.
- achieved bandwidth = bytes one step reads (every weight except the embedding
  table, a tied LM head included once, plus the KV cache at the mean context)
  × steps/s, and its fraction of the read bandwidth that
  hardware.measure_bandwidth measures right before that row's run (a shared
  machine's bandwidth drifts, so one probe at the start would not do).
- on CUDA, also a big random-weight model in bfloat16 (--big, default
  llama-3-8b), one decode step at the mean context with a static cache: eager,
  replayed from a CUDA Graph (the plain model and the fused one), and
  torch.compile(mode="reduce-overhead") (--skip-compile leaves it out), against
  the copy bandwidth probed before each row. --skip-smollm2 runs only
  these rows (for a GPU machine without the SmolLM2 weights).
- on a CPU, llama.cpp in the same run when its `llama-bench` is on PATH or named
  by $LLAMA_BENCH: the same SmolLM2 GGUF requantized to F32 by llama.cpp's own
  `llama-quantize` (kept in _build/llama.cpp/), the same prompt and new-token
  counts (`-d` prompt tokens of context, `-n` new tokens) and PyTorch's thread
  count. Without one, it prints how to build it (the benchmarks page: "llama.cpp beside it").
  The rows are minutes apart and a shared machine's bandwidth drifts, so it then
  runs llmperf fused and llama.cpp F32 in --pairs back-to-back pairs and prints
  the median ratio of their tokens/s, with the smallest and largest.

    python benchmarks/decode.py [--dtypes float32,bfloat16] [--repeat 3] [--pairs 5] [--json out.json]
"""

from __future__ import annotations

import llmperf  # noqa: F401  first: it sets OPENBLAS_THREAD_TIMEOUT before NumPy loads OpenBLAS
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from llmperf import benchresults, cost, hardware, load_smollm2, stream
from llmperf.config import get_config
from llmperf.device import (DTYPES, check_dtype, dtype_name, environment, free_memory_bytes, pick_device,
                            synchronize)
from llmperf.fast import fuse, numpy_blas, tuning
from llmperf.host import Steal
from llmperf.metrics import RequestTimes
from llmperf.weights import check_fits, load_smollm2_transformers, smollm2_gguf_path

LLAMA_CPP_DIR = Path(__file__).resolve().parents[1] / "_build" / "llama.cpp"  # the F32 GGUF, 540 MB: not committed
LLAMA_CPP_HOWTO = ("llama.cpp: no llama-bench on PATH and $LLAMA_BENCH unset, so no llama.cpp row. Build one "
                   "(the benchmarks page, \"llama.cpp beside it\": cmake, under 10 minutes on 2 cores) and run with "
                   "LLAMA_BENCH=/path/to/build/bin/llama-bench.")


def step_bytes(cfg, dtype: torch.dtype, context: int) -> int:
    """Bytes one decode step reads and writes: weights without the embedding table (tied head once) + KV cache."""
    return cost.decode_bytes(cfg, context, bytes_per_param=dtype.itemsize).total


def tpot_llmperf(model, prompt, new_tokens, repeat):
    """Median time per output token of llmperf's generation loop, from streamed timestamps."""
    runs = []
    for _ in range(repeat + 1):  # the first run is the warm-up
        sent = time.perf_counter()
        runs.append(RequestTimes(sent, [t for _, t in stream(model, prompt, new_tokens)]).tpot)
    return statistics.median(runs[1:])


def tpot_transformers(hf_model, prompt, new_tokens, repeat, device):
    """The same measurement through transformers' generate(), timestamped by a streamer."""
    from transformers.generation.streamers import BaseStreamer

    class Stamps(BaseStreamer):
        def __init__(self):
            self.times = []

        def put(self, value):  # called with the prompt first, then with each new token
            synchronize(device)
            self.times.append(time.perf_counter())

        def end(self):
            pass

    ids = torch.tensor([prompt], device=device)
    runs = []
    for _ in range(repeat + 1):
        s = Stamps()
        sent = time.perf_counter()
        with torch.inference_mode():
            hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                              min_new_tokens=new_tokens, do_sample=False, streamer=s, pad_token_id=0)
        runs.append(RequestTimes(sent, s.times[1:]).tpot)  # the streamer's first call is the prompt's
    return statistics.median(runs[1:])


def setup(device) -> dict:
    """environment() plus NumPy and its BLAS, which run the fused model's float32 CPU products."""
    import numpy as np

    env = {k: v for k, v in environment(device).items() if k != "dtype"}  # each row names its dtype
    return {**env, "numpy": np.__version__, "numpy_blas": numpy_blas()}


def mean_context(args) -> int:
    """Tokens in the cache, averaged over the generated tokens: the context the bytes are counted at."""
    return args.prompt + args.new_tokens // 2


def smollm2_rows(device, dtype, args):
    """The SmolLM2 rows in `dtype`, and a function that times the fused model once more (for the pairs)."""
    model, tok = load_smollm2(device, dtype)
    prompt = torch.randint(0, model.cfg.vocab_size, (args.prompt,), generator=torch.Generator().manual_seed(0)).tolist()
    fast = fuse(model)
    variants = {"llmperf plain": lambda: tpot_llmperf(model, prompt, args.new_tokens, args.repeat)}
    if not args.skip_transformers:
        hf = load_smollm2_transformers(device, dtype)
        variants["transformers"] = lambda: tpot_transformers(hf, prompt, args.new_tokens, args.repeat, device)
    # The fused model runs last: its BLAS threads keep spinning for a moment after it stops (see llmperf.fast).
    variants["llmperf fused"] = lambda: tpot_llmperf(fast, prompt, args.new_tokens, args.repeat)
    nbytes = step_bytes(model.cfg, dtype, mean_context(args))
    return measure_rows("smollm2-135m", dtype, variants, nbytes, device, "read"), variants["llmperf fused"]


def big_rows(device, args):
    """A big random-weight model (default Llama-3-8B-shaped) in bfloat16, one decode step with a static
    cache: eager; on CUDA also replayed from a CUDA Graph, plain and fused (llmperf.fast: one q/k/v product
    and one gate/up product per layer, so fewer and larger kernels), and torch.compile's reduce-overhead
    mode (fused kernels in a graph of its own; unless --skip-compile)."""
    from llmperf import build_model
    from llmperf.profiling import compiled_step, cuda_graph_step, time_forward
    from llmperf.timing import time_calls

    model = build_model(args.big, device, torch.bfloat16)
    context = mean_context(args)
    variants = {"eager": lambda: time_forward(model, context=context, repeat=20, static=True).median}
    if device.type == "cuda":
        graphs = {"CUDA Graph": cuda_graph_step(model, context=context)}
        # The fused matrices are new tensors: up to another copy of the weights (the q/k/v and gate/up ones).
        if free_memory_bytes(device) > 1.2 * cost.weight_bytes(model.cfg, 2):
            graphs["fused, CUDA Graph"] = cuda_graph_step(fuse(model), context=context)
        else:
            print(f"fused, CUDA Graph: skipped, too little free memory on {device} for a fused copy of the weights")
        if not args.skip_compile:
            graphs["torch.compile"] = compiled_step(model, context=context)  # reduce-overhead
        for name, step in graphs.items():
            variants[name] = lambda step=step: time_calls(step, warmup=5, repeat=20, device=device).median
    return measure_rows(args.big, torch.bfloat16, variants, step_bytes(model.cfg, torch.bfloat16, context),
                        device, "copy")


def llama_cpp_program(name: str, variable: str) -> str | None:
    """A program of llama.cpp's build: $`variable` if set (it must exist), else `name` on PATH, else None."""
    named = os.environ.get(variable)
    if named:
        if not (Path(named).is_file() and os.access(named, os.X_OK)):
            raise FileNotFoundError(f"{variable}={named} is not an executable file. Point it at the {name} "
                                    f"that llama.cpp's build wrote (build/bin/{name}), or unset it.")
        return named
    return shutil.which(name)


def llama_bench() -> str | None:
    """llama.cpp's benchmark program: $LLAMA_BENCH if set (it must exist), else `llama-bench` on PATH, else None."""
    return llama_cpp_program("llama-bench", "LLAMA_BENCH")


def llama_cpp_f32_gguf(bench: str) -> Path:
    """The bundled SmolLM2 GGUF (Q4_1) requantized to F32 by the llama-quantize next to `bench`: the weights
    llmperf dequantizes to float32 on load, in llama.cpp's own F32 file (made once, kept in _build/llama.cpp)."""
    out = LLAMA_CPP_DIR / "SmolLM2-135M-Instruct.F32.gguf"
    if out.is_file():
        return out
    quantize = Path(bench).with_name("llama-quantize")
    if not quantize.is_file():
        raise FileNotFoundError(f"No llama-quantize next to {bench}: build llama.cpp's llama-quantize target too.")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    done = subprocess.run([str(quantize), "--allow-requantize", smollm2_gguf_path(), str(partial), "F32"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"llama-quantize failed ({done.returncode}):\n{done.stderr[-2000:]}")
    partial.rename(out)
    return out


def llama_cpp_seconds_per_token(bench: str, gguf: Path, args, threads: int) -> float:
    """llama-bench's text generation: args.new_tokens tokens after args.prompt tokens of context (-d), on
    `threads` threads, args.repeat + 1 repetitions; its mean tokens/s, as seconds per token."""
    command = [bench, "-m", str(gguf), "-p", "0", "-n", str(args.new_tokens), "-d", str(args.prompt),
               "-t", str(threads), "-r", str(args.repeat + 1), "-o", "json"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout)
    return 1.0 / result[-1]["avg_ts"]


def llama_cpp_rows(bench: str, gguf: Path, args) -> list[dict]:
    """llama.cpp F32 on the CPU, in this run, against the bandwidth probed right before it."""
    nbytes = step_bytes(get_config("smollm2-135m"), torch.float32, mean_context(args))
    threads = torch.get_num_threads()
    return measure_rows("smollm2-135m", torch.float32,
                        {"llama.cpp F32": lambda: llama_cpp_seconds_per_token(bench, gguf, args, threads)},
                        nbytes, torch.device("cpu"), "read")


def paired_with_llama_cpp(fused_tpot, bench: str, gguf: Path, args) -> list[float]:
    """llmperf fused's tokens/s over llama.cpp F32's, in `args.pairs` pairs of runs made back to back.

    A shared machine's bandwidth drifts by more than the two differ, from one minute to the next; the
    rows of the table are minutes apart, a pair is seconds apart. Each pair is one llama-bench run (after
    its own warm-up) and one timed fused run (after one untimed), in alternating order.
    """
    threads, once = torch.get_num_threads(), argparse.Namespace(**{**vars(args), "repeat": 1})
    ratios = []
    for i in range(args.pairs):
        timed = {}
        for name in (("llama.cpp", "fused") if i % 2 == 0 else ("fused", "llama.cpp")):
            timed[name] = (llama_cpp_seconds_per_token(bench, gguf, once, threads) if name == "llama.cpp"
                           else fused_tpot())
        ratios.append(timed["llama.cpp"] / timed["fused"])  # seconds per token, inverted: tokens/s
    return ratios


def measure_rows(model: str, dtype: torch.dtype, variants: dict, nbytes: int, device, probe: str) -> list[dict]:
    """Run each variant (a function returning seconds per step), each right after its own bandwidth probe."""
    rows = []
    for variant, seconds_per_step in variants.items():
        bandwidth = hardware.measure_bandwidth(device)[probe]  # just before: a shared machine's bandwidth drifts
        rows.append(row(model, dtype_name(dtype), variant, seconds_per_step(), nbytes, bandwidth, probe))
    return rows


def row(model: str, dtype: str, variant: str, seconds: float, nbytes: int, probe_bw: float, probe_kind: str) -> dict:
    """One line of the table: a step of `seconds` moving `nbytes`, against the bandwidth probed just before it."""
    return {"model": model, "dtype": dtype, "variant": variant, "ms_per_token": seconds * 1e3,
            "tokens_per_s": 1 / seconds, "step_bytes": nbytes, "achieved_GBps": nbytes / seconds / 1e9,
            "probe": probe_kind, "probe_GBps": probe_bw / 1e9, "fraction_of_probe_bw": nbytes / seconds / probe_bw}


def check_big_model(device, args) -> None:
    """Refuse, before any measurement, a big model that cannot run here (ValueError or MemoryError)."""
    cfg = get_config(args.big)
    if device.type != "cuda":
        return  # its rows are CUDA-only
    check_dtype(device, torch.bfloat16)
    check_fits(cfg, device, torch.bfloat16)
    if args.prompt + args.new_tokens > cfg.max_seq_len:
        raise ValueError(f"--prompt + --new-tokens = {args.prompt + args.new_tokens} tokens, more than "
                         f"{cfg.name}'s max_seq_len of {cfg.max_seq_len}.")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--big", default="llama-3-8b", help="preset for the CUDA-only rows (random weights, bfloat16)")
    p.add_argument("--skip-compile", action="store_true",
                   help="leave out the CUDA-only torch.compile row (compiling takes a minute or two)")
    p.add_argument("--skip-transformers", action="store_true")
    p.add_argument("--skip-smollm2", action="store_true", help="only the big random-weight rows (CUDA only)")
    p.add_argument("--pairs", type=int, default=5,
                   help="back-to-back pairs of llmperf fused and llama.cpp F32 runs, when llama.cpp is there")
    p.add_argument("--json", default=None, help="also write the table to this file")
    args = p.parse_args(argv)
    dtypes = [d.strip() for d in args.dtypes.split(",")]
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        p.error(f"unknown dtype(s) {unknown}; choose from {list(DTYPES)}")
    if args.new_tokens < 2 or args.prompt < 1 or args.repeat < 1 or args.pairs < 0:
        p.error("need --new-tokens >= 2, --prompt >= 1, --repeat >= 1 and --pairs >= 0")
    try:
        device = pick_device(args.device)
    except (RuntimeError, ValueError) as e:  # a device this machine lacks
        p.error(str(e))
    if args.skip_smollm2 and device.type != "cuda":
        p.error(f"--skip-smollm2 leaves nothing to measure on {device.type}: the big-model rows run on CUDA only.")
    try:
        check_big_model(device, args)
    except (ValueError, MemoryError) as e:  # an unknown preset, a dtype the GPU lacks, too little memory, too long
        p.error(str(e))
    llama_cpp = None  # (llama-bench, the F32 GGUF), found and prepared before any measurement
    if device.type == "cpu" and "float32" in dtypes and not args.skip_smollm2:
        try:
            bench = llama_bench()
            llama_cpp = (bench, llama_cpp_f32_gguf(bench)) if bench else None
        except (FileNotFoundError, RuntimeError) as e:
            p.error(str(e))
        if llama_cpp is None:
            print(LLAMA_CPP_HOWTO)
    env = setup(device)
    print(env)
    rows, fused_float32, ratios = [], None, []
    with Steal() as steal:  # what the host's hypervisor took meanwhile: a thread that stops holds up every product
        for d in [] if args.skip_smollm2 else dtypes:
            new_rows, fused_tpot = smollm2_rows(device, DTYPES[d], args)
            rows += new_rows
            fused_float32 = fused_tpot if d == "float32" else fused_float32
        if llama_cpp:
            rows += llama_cpp_rows(*llama_cpp, args)
            if args.pairs:
                ratios = paired_with_llama_cpp(fused_float32, *llama_cpp, args)
        if device.type == "cuda":
            rows += big_rows(device, args)

    print(f"{'model':14} {'dtype':9} {'variant':15} {'ms/token':>9} {'tokens/s':>9} {'GB/s':>7} {'probe GB/s':>15} "
          f"{'of probe':>9}")
    for r in rows:
        print(f"{r['model']:14} {r['dtype']:9} {r['variant']:15} {r['ms_per_token']:>9.2f} {r['tokens_per_s']:>9.1f} "
              f"{r['achieved_GBps']:>7.1f} {r['probe']:>5} {r['probe_GBps']:>9.1f} {r['fraction_of_probe_bw']:>9.0%}")
    print("probe: the bandwidth measured (best of 10) right before each row's run; GB/s: the step's bytes / its time")
    for d in dtypes:
        by = {r["variant"]: r for r in rows if r["dtype"] == d and r["model"] == "smollm2-135m"}
        if "llama.cpp F32" in by:
            print(f"{d}: llmperf fused is {by['llmperf fused']['tokens_per_s'] / by['llama.cpp F32']['tokens_per_s']:.2f}x "
                  f"llama.cpp F32's tokens/s, in the rows above")
            if ratios:
                print(f"{d}: in {len(ratios)} back-to-back pairs, llmperf fused made {statistics.median(ratios):.3f}x "
                      f"llama.cpp F32's tokens/s (median; from {min(ratios):.3f}x to {max(ratios):.3f}x)")
        if "transformers" in by:
            print(f"{d}: llmperf fused is {by['llmperf fused']['tokens_per_s'] / by['transformers']['tokens_per_s']:.2f}x "
                  f"transformers' tokens/s (plain: {by['llmperf plain']['tokens_per_s'] / by['transformers']['tokens_per_s']:.2f}x)")
    if device.type == "cpu" and "float32" in dtypes:
        print(tuning.report())  # how the fused model stored each matrix on this host, and why
    print(f"steal: {benchresults.steal_said(steal.share)}")
    if args.json:
        results = {"rows": rows, "fused_over_llama_cpp_pairs": ratios, "numpy_step_layouts": tuning.timings()}
        benchresults.save(benchresults.result("decode", env, results, argv, steal.share), args.json)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

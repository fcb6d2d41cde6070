"""The serving stack under load: throughput against per-request latency. Printed, never asserted.

Starts `python -m llmperf.serve` (SmolLM2, on 127.0.0.1) once per batching
policy, continuous and static, each as a process of its own as llama-server
below runs, and drives them with `llmperf.bench` in a closed
loop at several concurrencies: each of C clients sends its next request (a
synthetic prompt of --input-len token ids) when its last one ends. Answers
vary in length as real ones do: each request asks for a number of tokens drawn
uniformly from 1 to 2·--output-len − 1 (mean --output-len), the same draws for
both policies. That is where the policies differ: a static batch waits for its
longest answer, while continuous batching refills a finished slot at once. For
each run it prints output tokens/s over the run, the median and p99 of TTFT and
TPOT, and the longest stall between two tokens any request saw (a newcomer's
prefill holds up the batch's decode steps). The server's maximum batch is the
largest concurrency, so at concurrency C up to C sequences decode together.

The server decodes with the fused model (`llmperf.fast`, as `python -m llmperf.serve` does); --plain serves
the teaching model instead.

The clients run in this process, apart from the server's, but share the processor with it: on a small CPU
they take a little time from the engine (from either server's alike). --url measures another server instead
(any OpenAI-compatible one; the policy is then its own).

When llama.cpp's `llama-server` is on PATH or named by $LLAMA_SERVER, the same workload also runs against it,
with as many slots (-np) as the largest concurrency and the same thread count, on the same SmolLM2 weights in
llama.cpp's own F32 file (made by the `llama-quantize` beside it, as benchmarks/decode.py makes it), and the
table gains its rows.

A shared machine's speed drifts by more than two servers differ, from one minute to the next. So all the
servers run at once (idle but one) and take turns at each concurrency, --rounds times (in the reverse order
every other round); a row is the median round's run, and the ratio to llama-server the median of the rounds'.

    python benchmarks/serving.py [--concurrency 1,4,8,16] [--rounds 3] [--json serving.json]
"""

from __future__ import annotations

import llmperf  # noqa: F401  first: it sets OPENBLAS_THREAD_TIMEOUT before NumPy loads OpenBLAS
import argparse
import asyncio
import random
import subprocess
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import torch

from llmperf import benchresults
from llmperf.bench import run, synthetic_prompts
from llmperf.device import DTYPES, environment, pick_device
from llmperf.host import Steal
from llmperf.scheduler.scheduler import POLICIES
from llmperf.metrics import summarize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode import llama_cpp_f32_gguf, llama_cpp_program  # noqa: E402  (benchmarks/decode.py, beside this one)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(url: str, model_name: str, concurrency: int, args, round_: int = 0) -> dict:
    """One closed-loop run at `concurrency`; its summary as a table row. Each round draws other prompts (the
    same for every server), so that no server answers a prompt it has seen (llama-server keeps prompts' keys)."""
    n = max(args.min_requests, 3 * concurrency)
    seed = 1000 * round_ + concurrency
    prompts = synthetic_prompts(n, args.input_len, vocab=args.vocab, seed=seed)
    draw = random.Random(seed)
    lengths = [draw.randint(1, 2 * args.output_len - 1) for _ in range(n)]
    records = asyncio.run(run(url, model_name, prompts, lengths, concurrency=concurrency, show_progress=False))
    s = summarize(records)
    return {"concurrency": concurrency, "requests": s.completed, "failed": s.failed,
            "output_tokens_per_s": s.output_throughput, "ttft_p50_ms": s.ttft.median * 1e3,
            "ttft_p99_ms": s.ttft.p99 * 1e3, "tpot_p50_ms": s.tpot.median * 1e3, "tpot_p99_ms": s.tpot.p99 * 1e3,
            "per_user_tokens_per_s": 1 / s.tpot.median, "e2e_p50_ms": s.e2e.median * 1e3,
            "longest_gap_ms": longest_gap(records) * 1e3}


def longest_gap(records) -> float:
    """The longest wait between two streamed tokens of any request (s): the longest decode stall a client saw,
    such as a newcomer's prefill run between two decode steps of the batch; 0 if no request had two tokens."""
    return max((b - a for r in records if r.ok for a, b in zip(r.token_times, r.token_times[1:])), default=0.0)


def llama_server_binary() -> str | None:
    """llama.cpp's server: $LLAMA_SERVER if set (it must exist), else `llama-server` on PATH, else None."""
    return llama_cpp_program("llama-server", "LLAMA_SERVER")


@contextmanager
def running(command: list[str], port: int, name: str):
    """`command`, a server, started as a process of its own; waits for its /health on 127.0.0.1:`port` (up to
    120 s), prints the notes it printed as it started (llmperf.serve's "Note: ..." lines: choices measured on a busy
    host), yields its API base URL, and stops it after."""
    root = Path(__file__).resolve().parent.parent  # where `python -m llmperf.serve` finds llmperf
    # Its log goes to a file, not a pipe: a pipe nobody reads fills up, and a server that logs every request
    # (llama-server does) then blocks on its next line, mid-run. Appending: the server writes at the end while
    # this process reads from the start.
    log = tempfile.TemporaryFile("a+")
    # One client for every poll, made before the server starts: httpx.get makes a client, with its TLS context, at
    # every call (tens of ms of CPU), and polls that cost a fifth of a core disturb what the server measures.
    poll = httpx.Client(timeout=1)
    proc = subprocess.Popen(command, stdout=log, stderr=log, text=True, cwd=root)
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{log.read()[-2000:]}")
            try:
                if poll.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"{name} did not answer /health within 120 s")
            time.sleep(0.2)
        log.seek(0)
        for line in log.read().splitlines():
            if line.startswith("Note:"):
                print(f"{name}: {line}", flush=True)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        poll.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def llmperf_serve(policy: str, slots: int, args, port: int) -> list[str]:
    """The command that starts `python -m llmperf.serve` with `policy` and `slots` sequences at once."""
    return ([sys.executable, "-m", "llmperf.serve", "--port", str(port), "--max-batch", str(slots), "--context",
             "1024", "--policy", policy, "--dtype", args.dtype] + (["--device", args.device] if args.device else [])
            + (["--plain"] if args.plain else []))


def llama_server(binary: str, slots: int, context: int, port: int) -> list[str]:
    """The command that starts llama-server with `slots` parallel slots of `context` tokens each, PyTorch's thread
    count, on SmolLM2 in F32."""
    threads = torch.get_num_threads()
    return [binary, "-m", str(llama_cpp_f32_gguf(binary)), "--host", "127.0.0.1", "--port", str(port), "-np",
            str(slots), "-c", str(slots * context), "-t", str(threads), "-tb", str(threads)]


def compare(commands: dict, levels: list[int], args) -> tuple[list[dict], dict[int, list[float]]]:
    """Start every server in `commands` ({name: (command, port, what)}) at once, then at each concurrency run
    each of them `args.rounds` times, taking turns (in the reverse order every other round), so that a machine
    whose speed drifts from one minute to the next treats them alike. Returns the rows (per server and
    concurrency, the run of median tokens/s) and, per concurrency, continuous batching's tokens/s over
    llama-server's in each round."""
    runs: dict[tuple[str, int], list[dict]] = {}
    ratios: dict[int, list[float]] = {c: [] for c in levels}
    with ExitStack() as stack:
        urls = {name: stack.enter_context(running(*command)) for name, command in commands.items()}
        names = {name: httpx.get(f"{url}/models", timeout=10).json()["data"][0]["id"] for name, url in urls.items()}
        for c in levels:
            for round_ in range(args.rounds):
                order = list(urls) if round_ % 2 == 0 else list(urls)[::-1]
                got = {name: measure(urls[name], names[name], c, args, round_) for name in order}
                for name, row in got.items():
                    runs.setdefault((name, c), []).append(row)
                if {"continuous", "llama-server"} <= set(got):
                    ratios[c].append(got["continuous"]["output_tokens_per_s"]
                                     / got["llama-server"]["output_tokens_per_s"])
            print(f"concurrency {c}: done", flush=True)
    rows = []
    for name in commands:
        for c in levels:
            ranked = sorted(runs[name, c], key=lambda r: r["output_tokens_per_s"])
            rows.append({"policy": name, **ranked[len(ranked) // 2]})
    return rows, ratios


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", default="1,4,8,16", help="comma-separated client counts")
    p.add_argument("--policies", default="continuous,static")
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--min-requests", type=int, default=16, help="at least this many requests per run")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--port", type=int, default=0, help="0: any free port")
    p.add_argument("--url", default=None, help="measure this server instead of starting one")
    p.add_argument("--json", default=None)
    p.add_argument("--plain", action="store_true", help="serve the plain teaching model, not the fused one")
    p.add_argument("--rounds", type=int, default=1, help="runs of each server at each concurrency, taking turns")
    p.add_argument("--no-llama-cpp", dest="llama_cpp", action="store_false",
                   help="leave out llama-server even when it is there")
    args = p.parse_args(argv)
    try:
        levels = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        p.error(f"--concurrency must be comma-separated integers, got {args.concurrency!r}")
    policies = [x.strip() for x in args.policies.split(",")]
    if min(levels) < 1 or args.input_len < 1 or args.output_len < 2 or args.min_requests < 1 or args.rounds < 1:
        p.error("need concurrencies >= 1, --input-len >= 1, --output-len >= 2, --min-requests >= 1 and "
                "--rounds >= 1")
    if any(x not in POLICIES for x in policies):
        p.error(f"--policies must name continuous and/or static, got {args.policies!r}")

    try:  # before any work: a wrong $LLAMA_SERVER is said at once
        binary = llama_server_binary() if args.llama_cpp and not args.url else None
    except FileNotFoundError as e:
        p.error(str(e))
    rows = []
    if args.url:
        try:
            name = httpx.get(f"{args.url.rstrip('/')}/models", timeout=10).json()["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as e:
            p.error(f"could not reach {args.url}: {e}")
        args.vocab = 32_000
        env = {"device": "remote", "device_name": args.url}  # another server: its machine is not known here
        rows += [{"policy": "(server's own)", **measure(args.url, name, c, args)} for c in levels]
        ratios = {}
    else:
        from llmperf.config import get_config

        device = pick_device(args.device)
        args.vocab = get_config("smollm2-135m").vocab_size
        env = environment(device, DTYPES[args.dtype])
        print(env)
        commands = {}
        ports = iter([args.port or free_port()] + [free_port() for _ in range(len(policies))])  # --port: the first's
        for policy in policies:
            port = next(ports)
            commands[policy] = (llmperf_serve(policy, max(levels), args, port), port, "llmperf.serve")
        if binary:
            context = args.input_len + 2 * args.output_len + 16
            port = next(ports)
            commands["llama-server"] = (llama_server(binary, max(levels), context, port), port, "llama-server")
        elif args.llama_cpp:
            print("llama.cpp: no llama-server on PATH and $LLAMA_SERVER unset, so no llama.cpp rows (the "
                  "benchmarks page, \"llama.cpp beside it\", builds one).")
        with Steal() as steal:  # what the host's hypervisor took meanwhile
            rows, ratios = compare(commands, levels, args)
    print(f"\nclosed loop, {args.input_len}-token prompts, 1 to {2 * args.output_len - 1} new tokens each")
    print(f"{'policy':<15} {'clients':>7} {'tokens/s':>9} {'per user':>9} {'TTFT p50':>9} {'p99':>8} "
          f"{'TPOT p50':>9} {'p99':>8} {'E2E p50':>8} {'stall':>7}  (ms)")
    for r in rows:
        print(f"{r['policy']:<15} {r['concurrency']:>7} {r['output_tokens_per_s']:>9.1f} "
              f"{r['per_user_tokens_per_s']:>9.1f} {r['ttft_p50_ms']:>9.0f} {r['ttft_p99_ms']:>8.0f} "
              f"{r['tpot_p50_ms']:>9.1f} {r['tpot_p99_ms']:>8.1f} {r['e2e_p50_ms']:>8.0f} {r['longest_gap_ms']:>7.0f}")
    print("stall: the longest wait between two tokens of any request (a newcomer's prefill between two decode steps)")
    if any(len(r) for r in ratios.values()):
        print(f"rows: the median of {args.rounds} round{'s' if args.rounds > 1 else ''} by tokens/s; the servers "
              "took turns, one run each per round")
    for c, paired in ratios.items():
        if paired:
            clients = f"{c} client{'s' if c > 1 else ''}"
            spread = f" (median of {len(paired)} rounds: {min(paired):.2f}x to {max(paired):.2f}x)" if len(
                paired) > 1 else ""
            print(f"at {clients}: llmperf.serve made {statistics.median(paired):.2f}x llama-server's output "
                  f"tokens/s{spread}")
    share = None if args.url else steal.share
    if not args.url:
        print(f"steal: {benchresults.steal_said(share)}")
    if args.json:
        results = {"rows": rows, "dtype": args.dtype, "input_len": args.input_len, "output_len": args.output_len,
                   "continuous_over_llama_server": {str(c): r for c, r in ratios.items()}}
        benchresults.save(benchresults.result("serving", env, results, argv, share), args.json)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Chunked prefill: what a long prompt's arrival costs the sequences already decoding. Printed, never asserted.

An engine (`llmperf.engine`, the fused SmolLM2 as the server runs it) decodes --decoding requests; then one
request with a --long-prompt-token prompt arrives. Every sequence in the batch waits for the steps that prefill
it. With a step's prefill bounded by `prefill_chunk` positions (`llmperf.prefills`), the prompt is prefilled in
pieces, and the batch gets a token between them: the longest gap between two of a decoding request's tokens
shrinks, while the long request's own TTFT grows by the decode steps run between its pieces.

For each --chunks value (one larger than the prompt: all at once, as without chunking) it prints the longest
gap any decoding request saw, their median gap (TPOT), and the long request's TTFT. The chunk sizes take turns,
--rounds times (in the reverse order every other round), since a shared machine drifts; a row is the median
round.

    python benchmarks/chunked_prefill.py [--long-prompt 1024] [--chunks 4096,512,256] [--rounds 3] [--json F]
"""

from __future__ import annotations

import llmperf  # noqa: F401  first: it sets OPENBLAS_THREAD_TIMEOUT before NumPy loads OpenBLAS
import argparse
import statistics
import sys

import torch

from llmperf import benchresults
from llmperf.device import environment, pick_device
from llmperf.engine import Engine, Request
from llmperf.fast import served
from llmperf.weights import load_smollm2

WARM_STEPS = 4  # decode steps before the long prompt arrives


def one_run(model, chunk: int, long_prompt: list[int], decoding: int, answer: int) -> dict[str, float]:
    """`decoding` requests decode; the long prompt arrives after WARM_STEPS steps. Returns the decoders' longest
    and median gap between tokens and the long request's TTFT (ms)."""
    engine = Engine(model, max_batch=decoding + 1, capacity=len(long_prompt) + answer, prefill_chunk=chunk)
    decoders = [engine.submit(Request([1 + i, 2, 3, 4, 5, 6, 7, 8], answer)) for i in range(decoding)]
    for _ in range(WARM_STEPS):
        engine.step()
    long = engine.submit(Request(long_prompt, 1))
    engine.run()
    gaps = [b - a for r in decoders for a, b in zip(r.token_times, r.token_times[1:])]
    return {"longest gap (ms)": max(gaps) * 1e3, "median gap (ms)": statistics.median(gaps) * 1e3,
            "long TTFT (ms)": (long.token_times[0] - long.sent) * 1e3}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--long-prompt", type=int, default=1024, help="tokens of the prompt that arrives (default 1024)")
    p.add_argument("--decoding", type=int, default=2, help="requests decoding when it arrives (default 2)")
    p.add_argument("--chunks", default="4096,512,256", help="prefill_chunk values, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default=None)
    p.add_argument("--json", default=None, help="also write the rows here, with the environment")
    args = p.parse_args(argv)
    try:
        chunks = [int(c) for c in args.chunks.split(",")]
    except ValueError:
        p.error(f"--chunks takes whole numbers separated by commas, got {args.chunks!r}")
    if min(chunks) < 1 or args.rounds < 1 or args.decoding < 1 or not 1 < args.long_prompt <= 8000:
        p.error("need chunks >= 1, --rounds >= 1, --decoding >= 1 and --long-prompt in 2..8000")
    try:
        device = pick_device(args.device)
    except (RuntimeError, ValueError) as e:
        p.error(str(e))
    env = environment(device)
    print(env)
    model = served(load_smollm2(device, torch.float32)[0])
    long_prompt = torch.randint(0, model.cfg.vocab_size, (args.long_prompt,),
                                generator=torch.Generator().manual_seed(0)).tolist()
    answer = 64  # enough decode steps to outlast the long prompt's prefill
    one_run(model, min(chunks), long_prompt[:64], args.decoding, 8)  # warm-up: packing, first passes
    runs: dict[int, list[dict]] = {c: [] for c in chunks}
    for r in range(args.rounds):
        for c in (chunks if r % 2 == 0 else chunks[::-1]):
            runs[c].append(one_run(model, c, long_prompt, args.decoding, answer))
    print(f"{args.decoding} requests decoding, then a {args.long_prompt}-token prompt arrives "
          f"(median of {args.rounds} rounds):")
    print(f"{'prefill_chunk':>14} {'pieces':>7} {'longest gap (ms)':>17} {'median gap (ms)':>16} "
          f"{'long TTFT (ms)':>15}")
    rows = []
    for c, rs in runs.items():
        med = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
        rows.append({"prefill_chunk": c, "pieces": -(-args.long_prompt // c), **med})
        print(f"{c:>14} {-(-args.long_prompt // c):>7} {med['longest gap (ms)']:>17.0f} "
              f"{med['median gap (ms)']:>16.1f} {med['long TTFT (ms)']:>15.0f}")
    if args.json:
        results = {"rows": rows, "dtype": "float32", "long_prompt": args.long_prompt, "decoding": args.decoding}
        benchresults.save(benchresults.result("chunked_prefill", env, results, argv), args.json)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

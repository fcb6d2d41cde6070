"""`python -m llmperf`: the quickest check that an install works.

Prints the environment, asks SmolLM2 one question, streams the answer and
reports the time to first token and the decode speed.
"""

from __future__ import annotations

import argparse
import sys
import time

from .device import DTYPES, describe, pick_device
from .generation import stream
from .metrics import RequestTimes
from .weights import load_smollm2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmperf", description=__doc__.splitlines()[0])
    parser.add_argument("prompt", nargs="?", default="What is the capital of France?")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--device", default=None, help="cpu, cuda or mps (default: the best available)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    args = parser.parse_args(argv)
    if not args.prompt.strip():
        parser.error("the prompt is empty: ask the model something.")
    if args.max_new_tokens < 1:
        parser.error("--max-new-tokens must be at least 1.")

    device, dtype = pick_device(args.device), DTYPES[args.dtype]
    print(describe(device, dtype), "\n")
    t = time.perf_counter()
    model, tokenizer = load_smollm2(device, dtype)
    print(f"Loaded SmolLM2-135M-Instruct in {time.perf_counter() - t:.1f} s.\n")

    prompt_ids = tokenizer.encode_chat(args.prompt)
    print(f"user: {args.prompt}\nassistant: ", end="", flush=True)
    t0 = time.perf_counter()
    times, ids, shown = [], [], ""
    for token_id, t in stream(model, prompt_ids, args.max_new_tokens, stop_ids=[tokenizer.eos_id]):
        times.append(t)
        if token_id == tokenizer.eos_id:
            break
        ids.append(token_id)
        text = tokenizer.decode(ids)  # decode the whole answer: one character can span two tokens
        print(text[len(shown):], end="", flush=True)
        shown = text
    print("\n")

    request = RequestTimes(t0, times)
    print(f"prompt: {len(prompt_ids)} tokens, answer: {request.n_tokens} tokens")
    print(f"time to first token: {request.ttft * 1e3:.0f} ms")
    if request.tpot is not None:
        print(f"time per output token: {request.tpot * 1e3:.1f} ms ({1 / request.tpot:.1f} tokens/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

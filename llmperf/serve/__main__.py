"""`python -m llmperf.serve`: serve SmolLM2 over OpenAI's API (see `llmperf.serve`)."""

from __future__ import annotations

import argparse
import sys

from ..engine import POLICIES
from ..prefills import GPU_CHUNK, LARGE_GPU_CHUNK, PREFILL_CHUNK
from . import __doc__ as DOC
from .server import create_app, serve
from .worker import in_passing_thread


def main(argv=None) -> int:
    from ..config import get_config
    from ..device import DTYPES, describe, pick_device
    from ..weights import load_smollm2

    p = argparse.ArgumentParser(prog="python -m llmperf.serve", description=DOC.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-batch", type=int, default=8, help="sequences decoded together")
    p.add_argument("--context", type=int, default=2048, help="most tokens (prompt + answer) per request")
    p.add_argument("--policy", choices=POLICIES, default="continuous")
    p.add_argument("--max-queue", type=int, default=256, help="waiting requests before answering 503")
    p.add_argument("--prefill-chunk", type=int, default=None, help="most prompt positions prefilled per step before "
                   f"the batch decodes; longer prompts are prefilled in pieces (default: {PREFILL_CHUNK} on a CPU, "
                   f"as llama.cpp; on a GPU {GPU_CHUNK}, or {LARGE_GPU_CHUNK} on a CUDA GPU of 70 GiB or more "
                   "other than an A100, as vLLM)")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--plain", action="store_true", help="serve the plain teaching model (model.py) instead of "
                   "its fused form (llmperf.fast), whose float32 CPU decode steps run in NumPy")
    args = p.parse_args(argv)
    chunk_ok = args.prefill_chunk is None or args.prefill_chunk >= 1  # None: the device's default
    if args.max_batch < 1 or args.max_queue < 1 or not chunk_ok or not 0 < args.port < 65536:
        p.error("need --max-batch >= 1, --max-queue >= 1, --prefill-chunk >= 1 and a port in 1..65535")
    try:
        device = pick_device(args.device)
    except (RuntimeError, ValueError) as e:
        p.error(str(e))
    model_cfg = get_config("smollm2-135m")
    if not 1 < args.context <= model_cfg.max_seq_len:
        p.error(f"--context must lie in 2..{model_cfg.max_seq_len}")

    def prepare():  # PyTorch's parallel work in a thread that ends with it: see `worker.in_passing_thread`
        model, tokenizer = load_smollm2(device, DTYPES[args.dtype])
        return create_app(model, tokenizer, max_batch=args.max_batch, capacity=args.context, policy=args.policy,
                          max_queue=args.max_queue, fast=not args.plain, prefill_chunk=args.prefill_chunk)

    app = in_passing_thread(prepare)
    print(describe(device, DTYPES[args.dtype]))
    print(f"Serving smollm2-135m-instruct at http://{args.host}:{args.port}/v1 "
          f"({args.policy} batching, up to {args.max_batch} at once, {'plain' if args.plain else 'fused'} model, "
          f"at most {app.state.engine.prefill_chunk} prompt positions prefilled a step). "
          "Ctrl-C or SIGTERM stops.", flush=True)
    serve(app, host=args.host, port=args.port)
    print("Stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

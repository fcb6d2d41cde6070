"""`python -m llmperf.serve`: serve SmolLM2 over OpenAI's API (see `llmperf.serve`)."""

from __future__ import annotations

import argparse
import sys

from ..scheduler.scheduler import POLICIES
from ..prefills import GPU_CHUNK, LARGE_GPU_CHUNK, PREFILL_CHUNK
from . import __doc__ as DOC
from ..fast import served, tuning
from .config import resolve
from .server import create_app, serve
from .worker import in_passing_thread


def main(argv=None) -> int:
    from ..config import get_config
    from ..device import DTYPES, describe, pick_device
    from ..weights import load_smollm2

    p = argparse.ArgumentParser(prog="python -m llmperf.serve", description=DOC.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-num-seqs", "--max-batch", dest="max_num_seqs", type=int, default=8,
                   help="requests in flight at once, prefilling or decoding (vLLM's name; --max-batch is an alias)")
    p.add_argument("--max-model-len", "--context", dest="max_model_len", type=int, default=2048,
                   help="most tokens (prompt + answer) per request (vLLM's name; --context is an alias)")
    p.add_argument("--policy", choices=POLICIES, default="continuous")
    p.add_argument("--max-queue", type=int, default=256, help="waiting requests before answering 503")
    p.add_argument("--prefill-chunk", type=int, default=None, help="most prompt positions prefilled per step before "
                   f"the batch decodes; longer prompts are prefilled in pieces (default: {PREFILL_CHUNK} on a CPU, "
                   f"as llama.cpp; on a GPU {GPU_CHUNK}, or {LARGE_GPU_CHUNK} on a CUDA GPU of 70 GiB or more "
                   "other than an A100, as vLLM)")
    p.add_argument("--block-size", type=int, default=16, help="positions per KV block (default 16, as vLLM)")
    pool = p.add_mutually_exclusive_group()
    pool.add_argument("--kv-cache-memory-bytes", type=int, default=None,
                      help="the KV pool's size in bytes (default: room for --max-num-seqs whole contexts; on a GPU "
                      "at most 90%% of its memory less the weights, as vLLM's --gpu-memory-utilization)")
    pool.add_argument("--num-gpu-blocks-override", "--num-blocks", dest="num_blocks", type=int, default=None,
                      help="the KV pool's size in blocks (vLLM's name; --num-blocks is an alias)")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                   help="share the KV blocks of prompts' common prefixes (default: on, as vLLM V1)")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--plain", action="store_true", help="serve the plain teaching model (model.py) instead of "
                   "its fused form (llmperf.fast), whose float32 CPU decode steps run in NumPy")
    args = p.parse_args(argv)
    chunk_ok = args.prefill_chunk is None or args.prefill_chunk >= 1  # None: the device's default
    if args.max_num_seqs < 1 or args.max_queue < 1 or not chunk_ok or not 0 < args.port < 65536:
        p.error("need --max-num-seqs >= 1, --max-queue >= 1, --prefill-chunk >= 1 and a port in 1..65535")
    if args.block_size < 1 or (args.num_blocks is not None and args.num_blocks < 1) or (
            args.kv_cache_memory_bytes is not None and args.kv_cache_memory_bytes < 1):
        p.error("need --block-size >= 1, and a KV pool of at least 1 block or byte")
    try:
        device = pick_device(args.device)
    except (RuntimeError, ValueError) as e:
        p.error(str(e))
    model_cfg = get_config("smollm2-135m")
    if not 1 < args.max_model_len <= model_cfg.max_seq_len:
        p.error(f"--max-model-len (--context) must lie in 2..{model_cfg.max_seq_len}")

    def prepare():  # PyTorch's parallel work in a thread that ends with it: see `worker.in_passing_thread`
        model, tokenizer = load_smollm2(device, DTYPES[args.dtype])
        model = model if args.plain else served(model)
        config = resolve(model, max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len,
                         policy=args.policy, prefill_chunk=args.prefill_chunk, block_size=args.block_size,
                         num_blocks=args.num_blocks, kv_cache_memory_bytes=args.kv_cache_memory_bytes,
                         enable_prefix_caching=args.enable_prefix_caching, max_queue=args.max_queue)
        return create_app(model, tokenizer, config)

    try:
        app = in_passing_thread(prepare)
    except ValueError as e:  # a setting the model or the device cannot serve (a KV pool too small, say)
        p.error(str(e))
    print(describe(device, DTYPES[args.dtype]))
    print(f"Serving smollm2-135m-instruct at http://{args.host}:{args.port}/v1 ({app.state.config.banner()}). "
          "Ctrl-C or SIGTERM stops.", flush=True)
    unsaved = tuning.unsaved_said()  # the host was busy while the fused model measured its choices
    if unsaved:
        print(f"Note: {unsaved}.", flush=True)
    serve(app, host=args.host, port=args.port)
    print("Stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

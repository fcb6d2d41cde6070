"""Where a run's requests come from, besides random token ids and a prompts file: synthetic text, a dataset, or a
trace replayed at its own times. The command's options for them (`add_arguments`, `check`), and `prompts_from`,
which reads and builds them all before any request is sent.

- Synthetic text (`--chat` without a prompts file, or `--tokenizer` given): prompts of --input-len tokens (drawn
  as the ids would be: --length-dist, --input-spread, --shared-prefix), cut from the package's corpus and counted
  with the tokenizer (`text`). The chat endpoint takes text only, so this is what `--chat` sends by default.
- `--dataset sharegpt --dataset-path FILE`: the first turn of conversations, vLLM's rules (`datasets`); each
  request's max_tokens is its answer's length in tokens.
- `--dataset jsonl --dataset-path FILE`: one request a line, a prompt's text or its length in tokens (text cut
  from the corpus), and its output length (else --output-len's).
- `--trace FILE`: a Mooncake trace. Each request is sent at its timestamp (divided by --trace-speed: 2 sends
  twice as fast), with a prompt of its input length whose 512-token blocks follow its hash_ids, and max_tokens
  its output length; --concurrency, if given, caps the requests in flight.

A `Workload` keeps, beside the prompts, the client's count of each prompt's tokens and the tokenizer that counted
them; `record` sets them beside the server's own counts (each answer's `usage`) for the run's JSON, and `counts`
says both in a line: they differ by whatever the server adds (a chat template's tokens) or counts otherwise (its
own tokenizer).
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..metrics import RequestRecord
from . import conversations, datasets, text, workloads
from .load import achieved_rate

DATASETS = ("sharegpt", "jsonl")
NUM_REQUESTS = 100  # --num-requests's default, but for a trace (all of it)


@dataclass
class Workload:
    """Prompts (text, or conversations of text) and their max_tokens, one each; `counted`: each prompt's tokens
    by the client's `tokenizer` (a conversation's: its first message's); `schedule`: seconds from the start at
    which each is sent (a trace), or None; `source`: what they came from, in words."""

    prompts: list
    outputs: list[int]
    counted: list[int]
    tokenizer: str
    source: str
    schedule: list[float] | None = None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options for synthetic text, datasets and traces."""
    p.add_argument("--tokenizer", default=None, help="counts synthetic text's tokens: a tokenizer.json, a Hugging "
                   "Face model folder holding one, or a .gguf file (default: SmolLM2's, from its GGUF file)")
    p.add_argument("--dataset", choices=DATASETS, default=None, help="requests from --dataset-path: sharegpt "
                   "(vLLM's format and rules) or jsonl (a prompt or input_length, maybe output_length, a line)")
    p.add_argument("--dataset-path", default=None, help="the --dataset file")
    p.add_argument("--trace", default=None, help="replay a Mooncake trace (JSON Lines: timestamp in ms, "
                   "input_length, output_length, hash_ids), each request at its time")
    p.add_argument("--trace-speed", type=float, default=1.0, help="replay the trace this many times faster")


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (p.error) options that do not go together, before any file is read; settle --num-requests."""
    given = [name for name, on in (("--prompts-file", args.prompts_file), ("--dataset", args.dataset),
                                   ("--trace", args.trace)) if on]
    if len(given) > 1:
        p.error(f"{' and '.join(given)} each give the prompts: choose one")
    if bool(args.dataset) != bool(args.dataset_path):
        p.error("--dataset and --dataset-path go together: --dataset sharegpt --dataset-path FILE")
    if args.tokenizer and args.prompts_file:
        p.error("--tokenizer counts synthetic text, datasets and traces; a --prompts-file is sent as it is")
    if args.trace_speed != 1.0 and not args.trace:
        p.error("--trace-speed is for --trace")
    if args.trace:
        if args.rate is not None or args.sweep:
            p.error("--trace sends each request at its timestamp: leave out --rate and --sweep (--trace-speed "
                    "scales the times, --concurrency caps the requests in flight)")
        if args.turns > 1:
            p.error("--trace replays single requests: leave out --turns")
        if not args.trace_speed > 0:
            p.error("--trace-speed must be > 0 (2: twice as fast)")
    if args.num_requests is None:
        args.num_requests = None if args.trace else NUM_REQUESTS


def wanted(args: argparse.Namespace) -> bool:
    """Whether `prompts_from` builds this run's prompts (else random ids or the prompts file do)."""
    return bool(args.dataset or args.trace or args.tokenizer or (args.chat and not args.prompts_file))


def prompts_from(args: argparse.Namespace) -> Workload | None:
    """The run's requests, read and built in full (ValueError on bad input); None where `wanted` is false."""
    if not wanted(args):
        return None
    sizer = text.load_tokenizer(args.tokenizer)
    corpus = text.Corpus(sizer)
    rng = random.Random(args.seed)
    if args.trace:
        return _trace(args, corpus, rng)
    n = args.num_requests * args.turns  # messages: a conversation's turns each take one
    outputs = workloads.lengths(n, args.output_len, args.output_spread, args.length_dist, seed=args.seed + 1)
    if args.dataset == "sharegpt":
        pairs = datasets.read_sharegpt(args.dataset_path)
        prompts, counted, outputs = datasets.sample_sharegpt(pairs, lambda s: len(sizer.encode(s)), n, args.seed,
                                                             args.dataset_path)
        source = f"ShareGPT {args.dataset_path}: {len(prompts)} of its {len(pairs)} two-turn entries (vLLM's rules)"
    elif args.dataset == "jsonl":
        rows = datasets.read_jsonl(args.dataset_path)[:n]
        prompts = [r["prompt"] if "prompt" in r else corpus.text(r["input_length"], rng) for r in rows]
        outputs = [r.get("output_length", outputs[i]) for i, r in enumerate(rows)]
        source = f"JSON Lines {args.dataset_path}: {len(rows)} requests"
    else:
        sizes = workloads.lengths(n, args.input_len, args.input_spread, args.length_dist, seed=args.seed)
        shared = [corpus.text(args.shared_prefix, rng) for _ in range(args.prefix_groups)] if args.shared_prefix \
            else [""] * args.prefix_groups
        prompts = [shared[i % args.prefix_groups] + corpus.text(size, rng) for i, size in enumerate(sizes)]
        source = f"synthetic text from {text.CORPUS.name}"
    counted = [len(sizer.encode(s)) for s in prompts]
    prompts, outputs, counted = ([seq[i % len(seq)] for i in range(n)] for seq in (prompts, outputs, counted))
    if args.turns > 1:
        prompts = conversations.from_lines(prompts, args.num_requests, args.turns)
        outputs, counted = outputs[::args.turns], counted[::args.turns]
    return Workload(prompts, outputs, counted, sizer.name, source)


def _trace(args: argparse.Namespace, corpus: text.Corpus, rng: random.Random) -> Workload:
    rows = datasets.read_trace(args.trace)
    rows = rows[:args.num_requests] if args.num_requests else rows
    prompts = [corpus.blocks(r.get("hash_ids", ()), r["input_length"], rng, args.seed) for r in rows]
    start = rows[0]["timestamp"]
    schedule = [(r["timestamp"] - start) / 1e3 / args.trace_speed for r in rows]
    args.num_requests = len(rows)
    speed = f", {args.trace_speed:g}x as fast" if args.trace_speed != 1 else ""
    return Workload(prompts, [r["output_length"] for r in rows], [len(corpus.sizer.encode(s)) for s in prompts],
                    corpus.sizer.name, f"trace {args.trace}: {len(rows)} requests over {schedule[-1]:.3g} s{speed}",
                    schedule)


def replayed(workload: Workload, records: Sequence[RequestRecord], concurrency: int | None, warmups: int = 0) -> str:
    """How a trace was offered, as `cli.describe_load` says a rate's: its source, the cap, the warm-up requests
    left out, and the rate the requests arrived at (their timestamps' rate, if the sender kept up)."""
    head = f"replaying {workload.source}" + (f", at most {concurrency} in flight" if concurrency else "")
    head += f" ({warmups} warm-up requests first, not counted)" if warmups else ""
    arrived = achieved_rate(records)
    return head + (f"\nrequests arrived at {arrived:.3g}/s" if arrived is not None else "")


def share(workload: Workload, index: int, shards: int) -> Workload:
    """The part of `workload` that shard `index` of `shards` sends (prompts index, index + shards, ...: `scale`),
    so that what is said of the inputs is said of the prompts this command sent."""
    if shards == 1:
        return workload
    pick = slice(index, None, shards)
    return replace(workload, prompts=workload.prompts[pick], outputs=workload.outputs[pick],
                   counted=workload.counted[pick],
                   schedule=None if workload.schedule is None else workload.schedule[pick])


def record(workload: Workload, records: Sequence[RequestRecord]) -> dict:
    """For the run's JSON: the source, the tokenizer, and per request (single requests only) the client's count
    of its prompt's tokens and the max_tokens asked beside the server's `usage` (None where it sent none)."""
    out = {"source": workload.source, "tokenizer": workload.tokenizer}
    if len(records) == len(workload.counted):  # one record per prompt: not conversations, nor a run cut short
        out["tokens"] = [{"client_prompt": c, "server_prompt": r.input_tokens if r.output_tokens is not None else None,
                          "asked_output": o, "server_output": r.output_tokens}
                         for c, o, r in zip(workload.counted, workload.outputs, records)]
    return out


def counts(workload: Workload, records: Sequence[RequestRecord]) -> str:
    """One line: the prompts' mean length by the client's tokenizer and by the server's `usage`."""
    client = sum(workload.counted) / len(workload.counted)
    said = [r.input_tokens for r in records if r.ok and r.output_tokens is not None and r.turn <= 1]
    server = (f"the server's usage {sum(said) / len(said):,.1f} (its own tokenizer, and any template it adds)" if said
              else "the server reported no usage")
    return f"{workload.source}; prompt tokens, mean: the client's count {client:,.1f} ({workload.tokenizer}), {server}"

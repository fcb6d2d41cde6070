"""The request files `python -m llmperf.bench` reads: a ShareGPT dataset, a JSON Lines dataset, a Mooncake trace.

Each is read and checked whole before any request is sent, and a bad file gets an error naming the file and,
for JSON Lines, the line (counted from 1): a missing file, a line that is not a JSON object, a field this reader
does not know (a misspelt field would otherwise be dropped without a word), a value of the wrong kind.

- ShareGPT (`read_sharegpt`, `sample_sharegpt`), as vLLM's benchmark reads it (vllm/benchmarks/datasets.py,
  `ShareGPTDataset` and `is_valid_sequence`, read for this module): one JSON list of entries, each with
  "conversations", a list of turns {"from": ..., "value": text}. Entries with fewer than two turns are left out;
  the rest are shuffled by `random.Random(seed).shuffle` (vLLM seeds Python's `random` and shuffles the same
  way, so one seed gives one order for both); the first turn is the prompt and the second turn's length in
  tokens the output length (max_tokens); a pair is dropped if either is under 4 tokens, the prompt over 1024, or
  the two together over 2048. Entries are taken in order until `n` are kept. Unlike vLLM, tokens are counted
  without special tokens (vLLM's count adds a beginning-of-sequence token where the tokenizer adds one), and
  fewer than `n` kept are cycled by the caller rather than drawn again at random.
- JSON Lines (`read_jsonl`): one request per line, {"prompt": text} or {"input_length": tokens}, and optionally
  "output_length" (its max_tokens).
- A Mooncake trace (`read_trace`), as Mooncake publishes its traces and AIPerf replays them: one request per
  line, {"timestamp": ms since the trace began, "input_length": tokens, "output_length": tokens, "hash_ids":
  [ids of its 512-token blocks]} ("hash_ids" optional), timestamps in order.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence

MIN_LEN, MAX_PROMPT, MAX_TOTAL = 4, 1024, 2048  # vLLM's `is_valid_sequence` defaults

JSONL_FIELDS = {"prompt": str, "input_length": int, "output_length": int}
TRACE_FIELDS = {"timestamp": (int, float), "input_length": int, "output_length": int, "hash_ids": list}


def read_sharegpt(path: str) -> list[tuple[str, str]]:
    """(first turn, second turn) of every entry with at least two turns, in the file's order."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"--dataset-path {path}: no such file.") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}).") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err.msg} at line {err.lineno}, column {err.colno}). A ShareGPT "
                         'file is one JSON list of {"conversations": [{"from": ..., "value": ...}, ...]}.') from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: a ShareGPT file is a JSON list of entries, this holds a {type(data).__name__}.")
    pairs = []
    for i, entry in enumerate(data):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue  # as vLLM: an entry without two turns is left out
        try:
            first, second = turns[0]["value"], turns[1]["value"]
        except (TypeError, KeyError):
            raise ValueError(f"{path}: entry {i} (from 0): each turn is {{\"from\": ..., \"value\": text}}; its "
                             "first two are not.") from None
        if not isinstance(first, str) or not isinstance(second, str):
            raise ValueError(f"{path}: entry {i} (from 0): a turn's \"value\" is text, not {type(first).__name__}.")
        pairs.append((first, second))
    if not pairs:
        raise ValueError(f"{path}: no entry has two turns (\"conversations\" with a prompt and an answer), so "
                         "there is nothing to send.")
    return pairs


def sample_sharegpt(pairs: Sequence[tuple[str, str]], count: Callable[[str], int], n: int, seed: int = 0,
                    path: str = "the dataset") -> tuple[list[str], list[int], list[int]]:
    """(prompts, their lengths in tokens, output lengths) of up to `n` pairs kept by vLLM's rules (the module's
    docstring), `count` giving a text's tokens; ValueError if none is kept, saying why they were dropped."""
    order = list(pairs)
    random.Random(seed).shuffle(order)
    prompts, lengths, outputs = [], [], []
    dropped = {"shorter than 4 tokens": 0, "a prompt over 1024 tokens": 0, "over 2048 tokens together": 0}
    for prompt, answer in order:
        if len(prompts) == n:
            break
        p, o = count(prompt), count(answer)
        why = ("shorter than 4 tokens" if p < MIN_LEN or o < MIN_LEN else "a prompt over 1024 tokens"
               if p > MAX_PROMPT else "over 2048 tokens together" if p + o > MAX_TOTAL else None)
        if why:
            dropped[why] += 1
            continue
        prompts.append(prompt)
        lengths.append(p)
        outputs.append(o)
    if not prompts:
        said = ", ".join(f"{k} {v}" for k, v in dropped.items() if v)
        raise ValueError(f"{path}: every one of its {len(pairs)} prompt-answer pairs was dropped by vLLM's rules "
                         f"(prompt and answer at least {MIN_LEN} tokens, prompt at most {MAX_PROMPT}, both at most "
                         f"{MAX_TOTAL}): {said}.")
    return prompts, lengths, outputs


def read_jsonl(path: str) -> list[dict]:
    """One dict per request line, each with "prompt" or "input_length" (not both), and maybe "output_length"."""
    rows = _lines(path, JSONL_FIELDS, "--dataset-path")
    for line, row in rows:
        if ("prompt" in row) == ("input_length" in row):
            raise ValueError(f"{path}, line {line}: give \"prompt\" (text) or \"input_length\" (tokens), one of "
                             "the two.")
        _positive(path, line, row, ("input_length", "output_length"))
    return [row for _, row in rows]


def read_trace(path: str) -> list[dict]:
    """One dict per request line, each with "timestamp" (ms, not decreasing), "input_length", "output_length",
    and maybe "hash_ids" (whole numbers)."""
    rows = _lines(path, TRACE_FIELDS, "--trace")
    last = None
    for line, row in rows:
        missing = [k for k in ("timestamp", "input_length", "output_length") if k not in row]
        if missing:
            raise ValueError(f"{path}, line {line}: a trace's request needs {', '.join(missing)} (every line has "
                             "timestamp, input_length and output_length).")
        _positive(path, line, row, ("input_length", "output_length"))
        if row["timestamp"] < 0 or (last is not None and row["timestamp"] < last):
            raise ValueError(f"{path}, line {line}: timestamp {row['timestamp']} comes before the line above's "
                             f"({last}); a trace's timestamps are ms from its start, >= 0 and in order.")
        last = row["timestamp"]
        if not all(isinstance(h, int) and not isinstance(h, bool) for h in row.get("hash_ids", [])):
            raise ValueError(f"{path}, line {line}: hash_ids are whole numbers, one per 512-token block.")
    return [row for _, row in rows]


def _lines(path: str, fields: dict, option: str) -> list[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSON Lines file, every field known and of its kind."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().splitlines()
    except FileNotFoundError:
        raise ValueError(f"{option} {path}: no such file.") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}).") from None
    rows = []
    for line, raw in enumerate(text, start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}, line {line}: not JSON ({err.msg}, column {err.colno}). Each line is one "
                             "JSON object.") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}, line {line}: each line is one JSON object {{...}}, this is a "
                             f"{type(row).__name__}.")
        unknown = sorted(set(row) - set(fields))
        if unknown:
            raise ValueError(f"{path}, line {line}: unknown field {', '.join(map(repr, unknown))}; the fields are "
                             f"{', '.join(fields)}.")
        for key, kind in fields.items():
            if key in row and (not isinstance(row[key], kind) or isinstance(row[key], bool)):
                said = {str: "text", list: "list"}.get(kind, "number")
                raise ValueError(f"{path}, line {line}: {key} is {row[key]!r}, not {said}.")
        rows.append((line, row))
    if not rows:
        raise ValueError(f"{path} holds no requests (no line that is not blank).")
    return rows


def _positive(path: str, line: int, row: dict, keys) -> None:
    for key in keys:
        if key in row and row[key] < 1:
            raise ValueError(f"{path}, line {line}: {key} is {row[key]}; a length is at least 1 token.")

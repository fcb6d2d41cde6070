"""What a run of `python -m llmperf.bench` reads and writes: a prompts file in, and the run's JSON and CSV out.

The JSON holds what two runs need to be compared (the exact command, the URL, the model, the client's
environment, the definition each number follows) beside every request; the CSV holds one row per request.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import platform
import shlex
import sys
from collections.abc import Sequence

from ..host import cpu_name
from ..metrics import RequestRecord
from . import names
from .sweep import Sweep


def write_csv(records: "Sequence[RequestRecord] | Sweep", path: str) -> None:
    """One row per request: send time, the wait for a slot in the client, its turn in a conversation, TTFT, E2E,
    TPOT (s), token counts, error. For a sweep, one row per point instead (`Point.row`), as guidellm writes one
    per benchmark."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        if isinstance(records, Sweep):
            rows = records.rows()
            heads = list(dict.fromkeys(h for r in rows for h in r))
            w.writerow(heads)
            w.writerows([r.get(h) for h in heads] for r in rows)
            return
        w.writerow(["sent", "queued", "turn", "ttft", "e2e", "tpot", "input_tokens", "output_tokens", "chunks",
                    "error"])
        for r in records:
            t = r.times if r.ok else None
            w.writerow([r.sent, r.queued, r.turn, t and t.ttft, t and t.e2e, t and t.tpot, r.input_tokens,
                        t.n_tokens if t else 0, len(r.token_times), r.error or ""])


def environment() -> dict:
    """Where the load generator ran, for two runs' JSON to be compared: when (UTC), the host, its processor and
    cores, Python and the HTTP client's version. (The server's machine is the server's to report.)"""
    import httpx

    from .. import __version__

    return {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "platform": platform.platform(), "processor": cpu_name(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(), "httpx": httpx.__version__,
            "llmperf": __version__}


def write_json(path: str, argv, base: str, model: str, **measured) -> None:
    """A run's JSON: what two runs need to be compared (the exact command, the URL, the model, the client's
    environment, which definition each number follows), then what was `measured`."""
    command = "python -m llmperf.bench " + shlex.join(sys.argv[1:] if argv is None else argv)
    with open(path, "w") as f:
        json.dump({"command": command, "url": base, "model": model, "environment": environment(),
                   "definitions": names.definitions(), **measured}, f, indent=1)


def load_prompts(path: str) -> list:
    """One prompt per line; a JSON Lines file may give {"prompt": ...} objects instead."""
    prompts = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                prompts.append(json.loads(line)["prompt"])
            else:
                prompts.append(line)
    if not prompts:
        raise ValueError(f"{path} holds no prompts.")
    return prompts

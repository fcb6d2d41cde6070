"""A small JSON document on disk, as the reference runs and the benchmark results keep theirs. No torch.

`read` raises the caller's own error class, with a message that names the file and
what is wrong with it; `write` writes indented JSON (no NaN), creating the folder.
Checking a document's content is the caller's (its `validate`).
"""

from __future__ import annotations

import json
from pathlib import Path


def read(path, error: type[Exception]):
    """The parsed JSON of `path`; `error` (naming the file) if it cannot be read or is not valid JSON."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise error(f"{path}: cannot be read ({err.strerror or err}).") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"{path}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}).") from None


def write(data, path) -> Path:
    """`data` as indented JSON at `path` (its folder created); the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path

"""A small JSON document on disk, as the reference runs and the benchmark results keep theirs. No torch.

`read` raises the caller's own error class, with a message that names the file and
what is wrong with it; `write` writes indented JSON (no NaN), creating the folder.
`check_header` checks the two fields every such document starts with, its
"format" and its "version"; checking the rest is the caller's (its `validate`).
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


def check_header(data, path, fmt: str, newest: int, what: str, fail, error: type[Exception]) -> None:
    """Check that `data` is a dict whose "format" is `fmt` and whose "version" is a whole number from 1 to
    `newest`; if not, call `fail(path, why)` (the caller's message, which raises), or, for a version newer than
    `newest`, raise `error` saying to update llmperf. `what` names the kind of file ("an llmperf reference")."""
    if not isinstance(data, dict) or data.get("format") != fmt:
        fail(path, f'not {what} (no "format": "{fmt}" at the top)')
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        fail(path, f'"version" must be a whole number from 1, got {version!r}')
    if version > newest:
        raise error(f"{path}: format version {version}, newer than this llmperf reads ({newest}). "
                    "Update llmperf (git pull) to read it.")

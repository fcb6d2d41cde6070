"""What a chapter's prose asks of its code: the names its {eval}`val("name")` expressions read."""

from __future__ import annotations

import json
import re
from pathlib import Path


def glue_names(notebook: Path) -> set[str]:
    """Every name a markdown cell of `notebook` reads with {eval}`val("name...")`."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    return {m for c in cells if c["cell_type"] == "markdown"
            for m in re.findall(r'\{eval\}`val\("([A-Za-z0-9_]+)', "".join(c["source"]))}


def check_glued_once(parts, notebook: Path, unread_allowed: set[str] | None = None) -> None:
    """No name is glued by two of `parts` (dicts of glued numbers), and every name the prose reads is glued.
    With `unread_allowed` (a set, possibly empty), also: every glued name outside it is read by the prose."""
    names = [name for part in parts for name in part]
    assert len(names) == len(set(names)), "a name is glued twice"
    referenced = glue_names(notebook)
    assert referenced <= set(names), sorted(referenced - set(names))
    if unread_allowed is not None:
        unread = set(names) - referenced - unread_allowed
        assert not unread, sorted(unread)  # nothing glued and never read

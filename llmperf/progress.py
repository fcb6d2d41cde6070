"""The one progress bar every long sweep and load run shows (tqdm), with no PyTorch behind it.

It lives apart from `timing` so that the load generator (`llmperf.bench`, a client
that never touches a model) can show it without importing torch.
"""

from __future__ import annotations

import os
import sys

from tqdm import tqdm


def building_the_book() -> bool:
    """True while `make book` executes the notebooks (LLMPERF_BOOK=1): their outputs become the website."""
    return os.environ.get("LLMPERF_BOOK") == "1"


def progress(iterable, desc: str, total: int | None = None):
    """A progress bar over `iterable`, printed to stdout at its start and end only, in a terminal or a live
    notebook; none while the book is built, since a page is read after the work is done.

    (Intermediate states would all be kept in a notebook's saved output, one line each.)
    """
    return tqdm(iterable, desc=desc, total=total, file=sys.stdout, mininterval=float("inf"), ncols=80,
                disable=building_the_book())

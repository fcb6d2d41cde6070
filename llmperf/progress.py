"""The one progress bar every long sweep and load run shows (tqdm), with no PyTorch behind it.

It lives apart from `timing` so that the load generator (`llmperf.bench`, a client
that never touches a model) can show it without importing torch.
"""

from __future__ import annotations

import sys

from tqdm import tqdm


def progress(iterable, desc: str, total: int | None = None):
    """A progress bar over `iterable`, printed to stdout at its start and end only.

    (Intermediate states would all be kept in a notebook's saved output and shown on
    the website, one line each.)
    """
    return tqdm(iterable, desc=desc, total=total, file=sys.stdout, mininterval=float("inf"), ncols=80)

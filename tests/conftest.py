"""Shared fixtures: the real SmolLM2 is loaded once per test session (about 3 s)."""

import pytest
import torch

from llmperf import build_model, load_smollm2
from llmperf.weights import load_smollm2_transformers


@pytest.fixture(autouse=True)
def openblas_threads_restored():
    """A fused model leaves NumPy's OpenBLAS on the thread count measured for it (`fast.choices.measured_threads`);
    the next test starts from the count it had."""
    from llmperf.fast import blas

    threads = blas.openblas_threads()
    yield
    blas.use_threads(threads)


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer): SmolLM2-135M-Instruct in float32 on the CPU."""
    return load_smollm2(device="cpu", dtype=torch.float32)


@pytest.fixture(scope="session")
def tiny():
    """A random-weight model of the tiny preset, float32, CPU."""
    return build_model("tiny", device="cpu", seed=0)


@pytest.fixture(scope="session")
def hf_smollm2():
    """transformers' own model loaded from the same GGUF file: the reference implementation."""
    return load_smollm2_transformers(device="cpu", dtype=torch.float32)


def pytest_collection_modifyitems(config, items):
    """With LLMPERF_NOTEBOOKS_RAN_IN_BOOK=1 (set by .ci/run, right after `make book`), a chapter whose page the
    book build has just made is not executed a second time under nbval.

    The build ran every cell of it with errors raised (`raise_on_error` in _config.yml): a failing chapter
    fails `make book`, so nbval's run would add time and no check. A chapter with no built page, or one
    newer than its page, still runs here. A reader's `make test` sets nothing and runs every chapter."""
    import os
    from pathlib import Path

    if os.environ.get("LLMPERF_NOTEBOOKS_RAN_IN_BOOK") != "1":
        return
    root = Path(__file__).resolve().parents[1]
    if (root / "_build" / "html" / "reports").exists():  # the build's record of a notebook that failed
        return
    kept, ran_in_book = [], []
    for item in items:
        path = Path(str(item.fspath))
        page = root / "_build" / "html" / "notebooks" / f"{path.stem}.html"
        built = (path.suffix == ".ipynb" and path.parent == root / "notebooks" and page.exists()
                 and page.stat().st_mtime >= path.stat().st_mtime)
        (ran_in_book if built else kept).append(item)
    if ran_in_book:
        config.hook.pytest_deselected(items=ran_in_book)
        items[:] = kept

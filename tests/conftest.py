"""Shared fixtures: the real SmolLM2 is loaded once per test session (about 5 s)."""

import pytest
import torch

from llmperf import build_model, load_smollm2
from llmperf.weights import load_smollm2_transformers


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

"""Shared fixtures: the real SmolLM2 is loaded once per test session (about 5 s)."""

import os

import pytest
import torch

from llmperf import build_model, load_smollm2


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
    transformers = pytest.importorskip("transformers")
    from llmperf.weights import smollm2_gguf_path

    path = smollm2_gguf_path()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), torch_dtype=torch.float32)
    return model.eval()

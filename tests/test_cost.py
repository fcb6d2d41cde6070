"""The cost model against the seed's figures and against PyTorch's own FLOP counter."""

import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from llmperf import PRESETS, cost


def counted_flops(model, tokens):
    """FLOPs that torch.utils.flop_counter counts for one forward pass, with explicit attention."""
    model.attn_impl = "math"  # the counter sees sdpa as 0 FLOPs on a CPU; the math path is countable
    try:
        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            model(tokens)
    finally:
        model.attn_impl = "sdpa"
    return counter.get_total_flops()


@pytest.mark.parametrize("fixture, seq_len, batch", [("tiny", 37, 2), ("smollm2", 64, 1)])
def test_prefill_count_equals_flop_counter(request, fixture, seq_len, batch):
    model = request.getfixturevalue(fixture)
    model = model[0] if isinstance(model, tuple) else model
    tokens = torch.randint(0, model.cfg.vocab_size, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    full = cost.prefill_flops(model.cfg, seq_len, batch, attention="full")
    assert counted_flops(model, tokens) == full.total
    # The causal count differs from the counter's by exactly the masked half of the score matrix.
    causal = cost.prefill_flops(model.cfg, seq_len, batch, attention="causal")
    masked_pairs = batch * seq_len * (seq_len - 1) // 2
    assert full.total - causal.total == 4 * masked_pairs * model.cfg.q_dim * model.cfg.n_layers


def test_decode_count_equals_flop_counter(tiny):
    from llmperf import KVCache
    from llmperf.generate import decode_step

    cache = KVCache(tiny.cfg, 3, 32)
    with torch.inference_mode():
        tiny(torch.zeros(3, 20, dtype=torch.long), torch.arange(20), cache)
        with FlopCounterMode(display=False) as counter:
            tiny.attn_impl = "math"
            try:
                decode_step(tiny, torch.zeros(3, 1, dtype=torch.long), 20, cache)
            finally:
                tiny.attn_impl = "sdpa"
    assert counter.get_total_flops() == cost.decode_flops(tiny.cfg, context=21, batch=3).total


def test_seed_figures_for_llama_3_8b():
    cfg = PRESETS["llama-3-8b"]
    assert cost.estimate_2n(cfg) == 16_060_522_496  # 16.1 GFLOP per token
    assert round(cost.estimate_2n(cfg, 2000) / 1e12, 1) == 32.1
    assert round(cost.seed_attention_flops(cfg, 2000) / 1e12, 1) == 2.1
    assert round(cost.estimate_2n(cfg, 32000) / 1e12) == 514
    assert round(cost.seed_attention_flops(cfg, 32000) / 1e12) == 537
    assert round(cost.prefill_attention_crossover(cfg), -2) == 30_600
    s = cost.prefill_attention_crossover(cfg)
    assert cost.seed_attention_flops(cfg, 1) * s**2 == pytest.approx(cost.estimate_2n(cfg) * s)
    # q_dim = d_model for Llama-3-8B, so the "full" attention term is the seed's.
    assert cost.prefill_flops(cfg, 2000, attention="full").attention == cost.seed_attention_flops(cfg, 2000)


def test_exact_matmuls_vs_2n_estimate():
    cfg = PRESETS["llama-3-8b"]
    exact = sum(cost.matmul_flops(cfg, 1).values())
    # 2N counts the embedding table (no FLOPs) and the norms; the exact count is the rest.
    norms = cfg.d_model * (2 * cfg.n_layers + 1)
    assert cost.estimate_2n(cfg) - exact == 2 * (cfg.vocab_size * cfg.d_model + norms)
    tied = PRESETS["smollm2-135m"]  # tied: the only matrix 2N counts twice-used is counted once
    assert cost.estimate_2n(tied) - sum(cost.matmul_flops(tied, 1).values()) == 2 * tied.d_model * (2 * tied.n_layers + 1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="seq_len must be a positive integer"):
        cost.prefill_flops("tiny", 0)
    with pytest.raises(ValueError, match="attention must be one of"):
        cost.prefill_flops("tiny", 8, attention="sparse")
    with pytest.raises(ValueError, match="Unknown model preset"):
        cost.decode_flops("gpt-5", 8)


def test_cost_module_imports_no_torch():
    """cost.py is pure arithmetic: load it (and config.py) without the package, which imports torch."""
    import pathlib
    import subprocess

    code = """
import importlib.util, sys
for name in ("config", "cost"):
    spec = importlib.util.spec_from_file_location(f"llmperf.{name}", f"llmperf/{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
print("torch" in sys.modules)
"""
    root = pathlib.Path(cost.__file__).parent.parent
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert out.stdout.strip() == "False", out.stderr


def test_decode_bytes_match_the_seed_for_llama_3_8b():
    cfg = PRESETS["llama-3-8b"]
    b = cost.decode_bytes(cfg, context=1)
    assert round(b.weights / 1e9, 2) == 15.01  # every weight but the embedding table, fp16
    assert round(b.by_op["lm_head"] / 1e9, 2) == 1.05 and round(b.by_op["lm_head"] / b.weights, 3) == 0.070
    assert round(b.by_op["wo"] / cfg.n_layers / 1e6, 1) == 33.6  # seed: "33 MB" per layer
    qkv = (b.by_op["wq"] + b.by_op["wk"] + b.by_op["wv"]) / cfg.n_layers
    assert round(qkv / 1e6, 1) == 50.3  # the seed's "25 MB" is wrong: 25.2 M parameters is 50.3 MB
    assert round(cost.estimate_2n(cfg) / b.weights, 2) == 1.07  # FLOPs per byte at batch 1
    # KV cache: 131,072 bytes per token in bf16; 8k context is ~7 % of the weights
    assert cost.decode_bytes(cfg, 8192).by_op["kv_read"] == 131_072 * 8192
    assert round(cost.decode_bytes(cfg, 8192).by_op["kv_read"] / b.weights, 2) == 0.07


def test_decode_bytes_weights_do_not_grow_with_batch():
    one, many = cost.decode_bytes("smollm2-135m", 100), cost.decode_bytes("smollm2-135m", 100, batch=16)
    assert many.weights == one.weights and many.kv == 16 * one.kv
    with_act = cost.decode_bytes("smollm2-135m", 100, activations=True)
    assert with_act.total > one.total and with_act.weights == one.weights

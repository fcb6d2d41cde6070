"""The cost model against the widely quoted figures and against PyTorch's own FLOP counter."""

import sys

import pytest
import torch

from llmperf import PRESETS, cost
from llmperf.generation import decode_step, new_cache, prefill
from llmperf.profiling import count_flops


def counted_flops(model, tokens):
    """FLOPs that torch.utils.flop_counter counts for one forward pass."""
    with count_flops() as counter:
        model(tokens)
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
    cache = new_cache(tiny, 3, 32)
    with torch.inference_mode():
        prefill(tiny, torch.zeros(3, 20, dtype=torch.long), cache)
    with count_flops() as counter:
        decode_step(tiny, torch.zeros(3, 1, dtype=torch.long), 20, cache)
    assert counter.get_total_flops() == cost.decode_flops(tiny.cfg, context=21, batch=3).total


def test_count_flops_leaves_the_result_unchanged(tiny):
    """The counted pass runs attention in PyTorch's math form: the same function as the fused kernel."""
    tokens = torch.randint(0, tiny.cfg.vocab_size, (2, 20), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        fused = tiny(tokens)
    with count_flops():
        counted = tiny(tokens)
    assert torch.allclose(counted, fused, atol=1e-5)


def test_widely_quoted_figures_for_llama_3_8b():
    cfg = PRESETS["llama-3-8b"]
    assert cost.estimate_2n(cfg) == 16_060_522_496  # 16.1 GFLOP per token
    assert round(cost.estimate_2n(cfg, 2000) / 1e12, 1) == 32.1
    assert round(cost.estimate_attention(cfg, 2000) / 1e12, 1) == 2.1
    assert round(cost.estimate_2n(cfg, 32000) / 1e12) == 514
    assert round(cost.estimate_attention(cfg, 32000) / 1e12) == 537
    assert round(cost.prefill_attention_crossover(cfg), -2) == 30_600
    s = cost.prefill_attention_crossover(cfg)
    assert cost.estimate_attention(cfg, 1) * s**2 == pytest.approx(cost.estimate_2n(cfg) * s)
    # q_dim = d_model for Llama-3-8B, so the "full" attention term is the back-of-envelope one.
    assert cost.prefill_flops(cfg, 2000, attention="full").attention == cost.estimate_attention(cfg, 2000)


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


def test_pure_modules_import_no_torch():
    """The cost model, the metrics and the load generator (a client) import without PyTorch: the package's
    __init__ exports its names lazily, so importing a pure module loads no model code."""
    import subprocess

    code = ("import llmperf.config, llmperf.cost, llmperf.metrics, llmperf.bench, sys; "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('llmperf'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_package_still_exports_its_names():
    import llmperf

    assert llmperf.generate.__module__ == "llmperf.generation" and "build_model" in dir(llmperf)
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        llmperf.nonesuch


def test_decode_bytes_match_the_quoted_figures_for_llama_3_8b():
    cfg = PRESETS["llama-3-8b"]
    b = cost.decode_bytes(cfg, context=1)
    assert round(b.weights / 1e9, 2) == 15.01  # every weight but the embedding table, fp16
    assert round(b.by_op["lm_head"] / 1e9, 2) == 1.05 and round(b.by_op["lm_head"] / b.weights, 3) == 0.070
    assert round(b.by_op["wo"] / cfg.n_layers / 1e6, 1) == 33.6  # the source text: "33 MB" per layer
    qkv = (b.by_op["wq"] + b.by_op["wk"] + b.by_op["wv"]) / cfg.n_layers
    assert round(qkv / 1e6, 1) == 50.3  # the source text's "25 MB" is wrong: 25.2 M parameters is 50.3 MB
    assert round(cost.estimate_2n(cfg) / b.weights, 2) == 1.07  # FLOPs per byte at batch 1
    # KV cache: 131,072 bytes per token in bf16; 8k context is ~7 % of the weights
    assert cost.decode_bytes(cfg, 8192).by_op["kv_read"] == 131_072 * 8192
    assert round(cost.decode_bytes(cfg, 8192).by_op["kv_read"] / b.weights, 2) == 0.07


def test_decode_bytes_weights_do_not_grow_with_batch():
    one, many = cost.decode_bytes("smollm2-135m", 100), cost.decode_bytes("smollm2-135m", 100, batch=16)
    assert many.weights == one.weights and many.kv == 16 * one.kv
    with_act = cost.decode_bytes("smollm2-135m", 100, activations=True)
    assert with_act.total > one.total and with_act.weights == one.weights


def test_decode_intensity_of_llama_3_8b():
    cfg = PRESETS["llama-3-8b"]
    # The quoted 1.07 FLOP/byte is 2·N (embedding table included) over the bytes (embedding excluded);
    # the exact count does 2 FLOPs per 2-byte weight: 1.00.
    assert round(cost.decode_intensity(cfg, context=1, flops="2n"), 2) == 1.07
    assert round(cost.decode_intensity(cfg, context=1), 2) == 1.00
    assert cost.decode_intensity(cfg, 1) == cost.decode_flops(cfg, 1).total / cost.decode_bytes(cfg, 1).total
    # float32 weights halve it; a batch of 32 at a short context multiplies it by nearly 32.
    assert round(cost.decode_intensity(cfg, 1, bytes_per_param=4), 2) == 0.50
    assert 31 < cost.decode_intensity(cfg, 1, batch=32) < 32
    with pytest.raises(ValueError, match="flops must be one of"):
        cost.decode_intensity(cfg, 1, flops="quoted")


def test_decode_intensity_saturates_with_the_kv_cache():
    cfg = PRESETS["llama-3-8b"]
    ctx = 1024
    per_seq_flops = cost.decode_flops(cfg, ctx).total
    per_seq_kv = cost.decode_bytes(cfg, ctx).kv
    limit = per_seq_flops / per_seq_kv  # batch -> infinity: only the KV bytes grow
    values = [cost.decode_intensity(cfg, ctx, batch=b) for b in (1, 16, 256, 4096, 1 << 20)]
    assert values == sorted(values) and values[-1] < limit and values[-1] == pytest.approx(limit, rel=1e-3)


def test_decode_ops_add_up_to_the_step():
    for cfg, ctx, batch, bpp, act in [("llama-3-8b", 1024, 1, 2, False), ("smollm2-135m", 300, 8, 4, True),
                                      ("tiny", 17, 3, 2, False)]:
        ops = cost.decode_ops(cfg, ctx, batch, bpp, activations=act)
        assert sum(o.flops for o in ops.values()) == cost.decode_flops(cfg, ctx, batch).total
        assert sum(o.bytes for o in ops.values()) == cost.decode_bytes(cfg, ctx, batch, bpp, activations=act).total
    llama = PRESETS["llama-3-8b"]
    ops = cost.decode_ops(llama, 1)
    qkv = (ops["wq"].bytes + ops["wk"].bytes + ops["wv"].bytes) / ops["wq"].count
    assert qkv == 2 * 25_165_824 and round(qkv / 1e6, 1) == 50.3  # 25.2 M parameters per layer, not "25 MB"
    assert round((ops["w1"].bytes + ops["w3"].bytes + ops["w2"].bytes) / 32 / 1e6) == 352
    assert ops["attention"].count == 32 and ops["norms"].count == 65 and ops["lm_head"].count == 1
    assert ops["wq"].intensity == 1.0 and ops["kv_write"].intensity == 0.0
    # Attention reads the cache once per KV head and uses it for n_heads / n_kv_heads query heads.
    assert ops["attention"].intensity == 2 * llama.n_heads / llama.n_kv_heads / 2


def test_compute_bound_batch():
    cfg = PRESETS["llama-3-8b"]
    for ridge in (295, 206):  # H100 SXM, H200 SXM
        b = cost.compute_bound_batch(cfg, ridge, context=1)
        assert cost.decode_intensity(cfg, 1, b) >= ridge > cost.decode_intensity(cfg, 1, b - 1)
        assert ridge < b < 1.02 * ridge  # ~1 FLOP per byte per sequence
    assert cost.compute_bound_batch(cfg, 295, context=1) == 297
    assert cost.compute_bound_batch(cfg, 206, context=1) == 207
    # At 1k tokens of context each sequence's KV cache caps the intensity near 116 FLOP/byte: never.
    assert cost.compute_bound_batch(cfg, 206, context=1024) is None
    assert cost.compute_bound_batch(cfg, 0.5, context=1) == 1
    with pytest.raises(ValueError, match="ridge must be"):
        cost.compute_bound_batch(cfg, 0, context=1)


def test_kv_cache_bytes():
    llama = PRESETS["llama-3-8b"]
    assert cost.kv_bytes_per_token(llama) == 131_072 and cost.kv_bytes_per_token("smollm2-135m") == 23_040
    assert cost.kv_bytes_per_token(llama, 4) == 2 * 131_072
    assert round(cost.kv_cache_bytes(llama, 1024) / 1e9, 2) == 0.13
    assert round(cost.kv_cache_bytes(llama, 8192) / 1e9, 2) == 1.07
    assert cost.kv_cache_bytes(llama, 4096, batch=256) == 256 * 4096 * 131_072  # 137 GB
    assert cost.kv_cache_bytes("smollm2-135m", 10, bytes_per_element=4) == 10 * 46_080
    with pytest.raises(ValueError, match="context must be a positive integer"):
        cost.kv_cache_bytes(llama, 0)


def test_tpot_moves_a_few_percent_from_1k_to_8k_for_llama_3_8b():
    b1k, b8k = cost.decode_bytes("llama-3-8b", 1024), cost.decode_bytes("llama-3-8b", 8192)
    assert 0.06 < b8k.total / b1k.total - 1 < 0.07


def test_weight_bytes():
    assert cost.weight_bytes("llama-3-8b", 2) == 2 * 8_030_261_248
    assert cost.weight_bytes("smollm2-135m", 4) == 4 * 134_515_008  # the tied matrix once


def test_crossover_forms():
    cfg = PRESETS["llama-3-8b"]
    assert cost.prefill_attention_crossover(cfg, form="exact") > cost.prefill_attention_crossover(cfg)
    with pytest.raises(ValueError, match='form must be "estimate" or "exact"'):
        cost.prefill_attention_crossover(cfg, form="seed")


def test_matmul_intensity_and_compute_bound_rows():
    k, n = 4096, 14336  # Llama-3-8B's gate projection
    assert cost.matmul_intensity(1, k, n) == pytest.approx(1.0, rel=1e-3)  # one row: ~1 FLOP per 2-byte weight
    assert cost.matmul_intensity(2000, k, n) == pytest.approx(2000 * k * n / (k * n + 2000 * (k + n)))
    for ridge in (295.2, 206.0, 0.5):
        r = cost.compute_bound_rows(k, n, ridge)
        assert cost.matmul_intensity(r, k, n) >= ridge
        assert r == 1 or cost.matmul_intensity(r - 1, k, n) < ridge
    assert cost.compute_bound_rows(k, n, 295.2) == 326  # the H100's ridge, in prompt tokens
    # The intensity is capped at 2kn / (b(k + n)): a ridge past it is never reached.
    assert cost.compute_bound_rows(64, 64, 40.0) is None
    with pytest.raises(ValueError, match="ridge must be"):
        cost.compute_bound_rows(k, n, 0)
    with pytest.raises(ValueError, match="rows must be a positive integer"):
        cost.matmul_intensity(0, k, n)


@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("fixture, prompt, new_tokens", [("tiny", 9, 6), ("smollm2", 7, 4)])
def test_generation_cost_equals_flop_counter(request, fixture, prompt, new_tokens, cached):
    """A whole generation, naive or cached, counted by PyTorch and by the cost model: equal to the FLOP."""
    from llmperf import generate

    model = request.getfixturevalue(fixture)
    model = model[0] if isinstance(model, tuple) else model
    ids = torch.randint(0, model.cfg.vocab_size, (prompt,), generator=torch.Generator().manual_seed(1)).tolist()
    with count_flops() as counter:
        generate(model, ids, new_tokens, cache=cached)
    predicted = cost.generation_cost(model.cfg, prompt, new_tokens, cached=cached)
    assert counter.get_total_flops() == predicted.flops


def test_generation_cost_reproduces_the_missing_512_plus_512_table():
    """Llama-3-8B, 512-token prompt, 512 new tokens, the widely quoted conventions (2·N, full attention)."""
    naive = cost.generation_cost("llama-3-8b", 512, 512, cached=False, form="estimate")
    cached = cost.generation_cost("llama-3-8b", 512, 512, cached=True, form="estimate")
    assert round(naive.matmul_flops / 1e12) == 6311 and round(cached.matmul_flops / 1e12, 1) == 16.4
    assert round(naive.attention_flops / 1e12) == 164 and round(cached.attention_flops / 1e12, 2) == 0.34
    assert naive.weight_bytes == cached.weight_bytes and round(naive.weight_bytes / 1e12, 1) == 7.7
    assert naive.passes == cached.passes == 512 and naive.kv_bytes == 0 < cached.kv_bytes
    with pytest.raises(ValueError, match="form must be one of"):
        cost.generation_cost("llama-3-8b", 512, 512, form="seed")
    with pytest.raises(ValueError, match="more than llama-3-8b's max_seq_len"):
        cost.generation_cost("llama-3-8b", 8000, 500)


def test_naive_attention_crossover_agrees_with_the_pass_by_pass_totals():
    n = cost.naive_attention_crossover("smollm2-135m")
    roomy = PRESETS["smollm2-135m"].with_(max_seq_len=2 * n)
    before, at = (cost.generation_cost(roomy, 1, k, cached=False) for k in (n - 1, n))
    assert before.attention_flops < before.matmul_flops and at.attention_flops >= at.matmul_flops
    assert 30_000 < cost.naive_attention_crossover("llama-3-8b") < 50_000  # "tens of thousands of tokens"

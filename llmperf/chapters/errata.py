"""The source notes' figures that do not hold, each set beside the right one, for the errata page.

Arithmetic only, no measurement: every right figure comes from the tested cost model
(`llmperf.cost`) and the model presets (`llmperf.config`), for the model the notes use
(Llama-3-8B, 2-byte weights and cache), and NVIDIA's launch figures from chapter 5's
record of them (`anatomy.published`). The notes' own figures
are kept as they wrote them (`NOTES`), so the page can quote them; the checks in
`check()` hold every correction to what it claims.
"""

from __future__ import annotations

from ..config import get_config
from ..cost import decode_bytes, decode_flops, kv_cache_bytes, linear_shapes, prefill_attention_crossover
from ..cost import prefill_flops, weight_bytes
from .anatomy.published import GRAPH_ASYNC_S, GRAPH_KERNEL_S, GRAPH_REPLAYED_S, async_overhead, graph_overhead

MODEL = "llama-3-8b"
LONG_CONTEXT = 131_072  # Llama-3.1's 128k-token context
NOTES = {  # the figures as the source notes give them
    "qkv_mb": 25, "flops_per_token_g": 16.1, "intensity": 1.07, "attention_over_s": 32_000,
    "batch": 32, "served_tps": 15_000, "served_batch": 256, "per_user_tps": 12,
    "launches": 200, "launch_us": 5,
}
BATCH_CONTEXT = 8192  # the context at which the batch-32 saving is priced


def numbers() -> dict[str, float]:
    """Every figure the errata page glues: the notes' (`notes_*`) and the right ones, in the page's units."""
    cfg = get_config(MODEL)
    shapes = linear_shapes(cfg)
    qkv = sum(shapes[w][0] * shapes[w][1] for w in ("wq", "wk", "wv")) * 2
    step = decode_flops(cfg, context=1)
    step_bytes = decode_bytes(cfg, context=1)
    one = decode_bytes(cfg, context=BATCH_CONTEXT).total
    many = decode_bytes(cfg, context=BATCH_CONTEXT, batch=NOTES["batch"]).total / NOTES["batch"]
    s = NOTES["attention_over_s"]
    causal = prefill_flops(cfg, s, attention="causal", logits_for=1)
    out = {f"notes_{k}": v for k, v in NOTES.items()}
    out.update({
        "qkv_mb": qkv / 1e6,
        "flops_per_token_g": step.matmul / 1e9,
        "intensity": step.total / step_bytes.total,
        "crossover_estimate": prefill_attention_crossover(cfg, "estimate"),
        "crossover_causal": prefill_attention_crossover(cfg, "exact"),
        "attention_share_causal": causal.attention / causal.total,
        "long_context": LONG_CONTEXT,
        "long_kv_gb": kv_cache_bytes(cfg, LONG_CONTEXT) / 1e9,
        "weights_gb": weight_bytes(cfg, 2) / 1e9,
        "batch_context": BATCH_CONTEXT,
        "batch_saving": one / many,
        "per_user_tps": NOTES["served_tps"] / NOTES["served_batch"],
        "notes_both_tps": NOTES["per_user_tps"] * NOTES["served_batch"],
        "launch_overhead_us": async_overhead() * 1e6, "graph_overhead_us": graph_overhead() * 1e6,
        "nvidia_kernel_us": GRAPH_KERNEL_S * 1e6, "nvidia_async_us": GRAPH_ASYNC_S * 1e6,
        "nvidia_graph_us": GRAPH_REPLAYED_S * 1e6,
    })
    return out


def table(n: dict[str, float]) -> list[dict[str, str]]:
    """The numeric errata as rows: the figure, the notes' value, the right value, each with its unit."""
    return [
        {"figure": "q, k and v weights of one layer (fp16)", "the notes": f"{n['notes_qkv_mb']} MB",
         "right": f"{n['qkv_mb']:.1f} MB"},
        {"figure": "decode FLOPs per token, Llama-3-8B", "the notes": f"{n['notes_flops_per_token_g']} GFLOP",
         "right": f"{n['flops_per_token_g']:.1f} GFLOP"},
        {"figure": "decode step's arithmetic intensity, batch 1", "the notes": f"{n['notes_intensity']} FLOP/byte",
         "right": f"{n['intensity']:.2f} FLOP/byte"},
        {"figure": "prompt length where prefill attention equals the matmuls",
         "the notes": f"under {n['notes_attention_over_s']:,} tokens (full square)",
         "right": f"{n['crossover_causal']:,.0f} tokens (causal)"},
        {"figure": f"KV cache of one {n['long_context']:,}-token sequence", "the notes": "usually small",
         "right": f"{n['long_kv_gb']:.1f} GB (weights {n['weights_gb']:.1f} GB)"},
        {"figure": f"bytes per token, batch {n['notes_batch']} ÷ batch 1, {n['batch_context']:,}-token context",
         "the notes": f"{n['notes_batch']}× fewer", "right": f"{n['batch_saving']:.1f}× fewer"},
        {"figure": f"per-user speed at {n['notes_served_tps']:,} tokens/s and batch {n['notes_served_batch']}",
         "the notes": f"{n['notes_per_user_tps']} tokens/s", "right": f"{n['per_user_tps']:.1f} tokens/s"},
        {"figure": "launch overhead per kernel, asynchronous launches",
         "the notes": f"about {n['notes_launch_us']} µs", "right": f"{n['launch_overhead_us']:.1f} µs"},
    ]


def check(n: dict[str, float]) -> None:
    """Each correction says what its row claims: the notes' figure is off, and by the stated amount."""
    assert round(n["qkv_mb"]) == 2 * n["notes_qkv_mb"], n["qkv_mb"]  # the notes halved q/k/v's bytes
    assert n["flops_per_token_g"] < n["notes_flops_per_token_g"]  # the embedding lookup does no matmul
    assert abs(n["intensity"] - 1.0) < 0.01 < n["notes_intensity"] - n["intensity"]
    assert n["crossover_estimate"] < n["notes_attention_over_s"] < n["crossover_causal"]
    assert n["attention_share_causal"] < 0.5  # at the notes' 32,000 tokens, causal attention has not taken over
    assert n["long_kv_gb"] > n["weights_gb"]  # one long sequence's cache outweighs the model
    assert n["batch_saving"] < n["notes_batch"] / 2
    assert n["per_user_tps"] > 4 * n["notes_per_user_tps"]
    assert n["launch_overhead_us"] < n["notes_launch_us"] / 4


def kernel_numbers(kernels: list[tuple[str, object]]) -> dict[str, str]:
    """The sentence on the launch count, from the committed references' (label, kernels per step) pairs
    (`compare.Comparison("anatomy").values("kernels_per_step")`): the first GPU reference's count, or a
    sentence saying none is committed."""
    counted = [(label, value) for label, value in kernels if isinstance(value, int) and value > 0]
    if not counted:
        return {"kernels_text": "No committed GPU reference counts a step's kernels yet."}
    label, value = counted[0]
    return {"kernels_text": f"One eager decode step of SmolLM2, a smaller model than Llama-3-8B, launched "
                            f"{value:,} kernels ({label}), far more than {NOTES['launches']}."}

"""Counting what a decode step dispatches; CUDA Graph capture where a GPU exists."""

import pytest
import torch

from llmperf import build_model, generate
from llmperf.fast import fuse
from llmperf.profile import cuda_graph_step, forward_fn, op_counts


def test_op_counts_scale_with_layers(tiny):
    per_model = op_counts(tiny, context=8)["ops"]
    deeper = build_model(tiny.cfg.with_(n_layers=4), device="cpu")
    per_deeper = op_counts(deeper, context=8)["ops"]
    # Each layer runs the same ops, so two extra layers add exactly two layers' worth.
    assert per_deeper["aten::linear"] == per_model["aten::linear"] + 2 * 7
    assert per_model["aten::linear"] == 2 * 7 + 1  # seven projections per layer, plus the LM head
    assert per_model["aten::scaled_dot_product_attention"] == 2


def test_fused_model_dispatches_fewer_matmuls(tiny):
    plain, fused = op_counts(tiny, batch=2)["ops"], op_counts(fuse(tiny), batch=2)["ops"]
    assert plain["aten::linear"] == 2 * 7 + 1
    assert fused["aten::linear"] == 2 * 4 + 1  # qkv, wo, gate+up, down per layer, plus the LM head


def test_profiler_does_not_see_numpy_products(tiny):
    """At batch 1 in float32 on a CPU the fused model's products run in NumPy, outside PyTorch's dispatcher."""
    ops = op_counts(fuse(tiny), batch=1)["ops"]
    assert not any(name in ops for name in ("aten::linear", "aten::mm", "aten::matmul", "aten::bmm"))
    assert ops["aten::scaled_dot_product_attention"] == 2  # the rest of the step is still counted


def test_cuda_graph_needs_cuda(tiny):
    with pytest.raises(RuntimeError, match="CUDA Graphs need a CUDA device"):
        cuda_graph_step(tiny)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA Graphs need an NVIDIA GPU; this machine has none")
def test_cuda_graph_replay_matches_eager():
    model = build_model("tiny", device="cuda")
    torch.manual_seed(0)  # the same random token ids for the graph's step and the eager one
    replay = cuda_graph_step(model, batch=2, context=5)
    out = replay().clone()
    torch.manual_seed(0)
    eager = forward_fn(model, batch=2, context=5, static=True)()
    assert out.shape == (2, model.cfg.vocab_size) and torch.allclose(out, eager, atol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU; this machine has none")
def test_random_preset_generates_on_gpu():
    model = build_model("smollm2-135m", device="cuda", dtype=torch.bfloat16)
    out = generate(model, [1, 2, 3, 4], 8)
    assert out.shape == (8,)

"""The cost model: FLOPs and bytes of a forward pass, op by op, by arithmetic alone.

Pure Python (no torch): every number here follows from a `ModelConfig`, a batch
size and a sequence length, so the book can predict a measurement before making
it.

What is counted
---------------
One multiply-add is 2 FLOPs. A matrix product (M, K) @ (K, N) is 2·M·K·N FLOPs.
We count matrix products only, the way `torch.utils.flop_counter` does:

- the seven projections of each layer: wq, wk, wv, wo (attention) and
  w1 (gate), w3 (up), w2 (down) (the SwiGLU MLP);
- the LM head, d_model -> vocab, once per position whose logits are computed
  (a tied head is the embedding matrix used a second time, and does FLOPs);
- attention's two matrix products: scores = q @ k^T and the weighted sum
  probs @ v, each 2·q_dim FLOPs per (query, key) pair per layer.

What is not counted: the embedding (a table lookup: no arithmetic), RMSNorm,
RoPE, softmax, SiLU, the residual adds and sampling. Together they are a few
FLOPs per element of the activations, well under 1 % of a pass.

Two ways to count the attention term of a prefill of S tokens:
- "full": every query scores every one of the S keys, 4·S²·q_dim per layer.
  This is the usual back-of-envelope form (with q_dim = d_model) and what a
  kernel that computes the whole score matrix and then masks it executes.
- "causal": query i scores keys 0..i only, 4·q_dim·S(S+1)/2 per layer: the
  work a causal kernel (FlashAttention) actually needs, about half of "full".

And two ways to count the matmuls:
- `estimate_2n`: 2·N_params FLOPs per token, the standard estimate: each
  parameter does one multiply and one add. It includes the embedding table,
  which does no FLOPs, so it overestimates an untied model (Llama-3-8B by 6.5 %).
- `matmul_flops`: the exact count of the projections and the LM head.

Bytes of a decode step (`decode_bytes`): every weight matrix once (the
embedding table excluded: a lookup reads one row; a tied LM head included, since
the head reads the whole matrix), the norm weights, the KV cache read by
attention and the new key and value written. Activations are off by default:
at batch 1 they are a few vectors of d_model values, a rounding error next to the
weights.

Arithmetic intensity of a decode step (`decode_intensity`) is FLOPs / bytes. The
weights are read once per step however many sequences share it, while FLOPs
grow with the batch, so the intensity grows about linearly in the batch size
until the KV cache (read once per sequence) takes over the bytes. `decode_ops`
pairs each op's FLOPs with its bytes, for a per-op table; `decode_parts` groups
them into the weight products and attention, which meet the roofline separately;
`compute_bound_batch` solves for the batch at which a step (or its weight
products) reaches a device's ridge point.
KV-cache sizes: `kv_bytes_per_token`, `kv_cache_bytes`; the weights' memory: `weight_bytes`.
One product's intensity: `matmul_intensity`, and the rows at which it turns
compute-bound: `compute_bound_rows`. Whole generations, naive or cached, pass by
pass: `generation_passes`, and their totals: `generation_cost`.

The package's three modules: `passes` (one pass's FLOPs and bytes, op by op, and
the kinds of op a step is split into), `roofline` (intensity and the solvers) and
`generations` (whole generations, naive or cached). Every name is re-exported
here, so `cost.decode_bytes` reads the same whichever module holds it.
"""

from __future__ import annotations

from ..config import get_config  # noqa: F401  (cost.get_config("llama-3-8b"): a preset by name)
from .passes import (  # noqa: F401
    ATTENTION_FORMS, linear_shapes, Tally, Flops, matmul_flops, attention_flops, prefill_flops,
    decode_flops, estimate_2n, estimate_attention, prefill_attention_crossover, Bytes, decode_bytes, OpCost,
    decode_ops, decode_parts, kv_bytes_per_token, kv_cache_bytes, weight_bytes, PROJECTIONS, ATTENTION,
    KV_WRITE, NORMS, LM_HEAD, OTHER, OP_KINDS, KIND_LABELS, cost_by_kind
)
from .roofline import (  # noqa: F401
    FLOP_FORMS, decode_intensity, BOUND_PARTS, compute_bound_batch, matmul_intensity, compute_bound_rows
)
from .generations import (  # noqa: F401
    GENERATION_FORMS, GenerationCost, generation_passes, generation_cost, naive_attention_crossover
)

"""Model configurations: one dataclass and the presets the course uses.

Every shape in the course comes from a `ModelConfig`. The presets are the
published configurations (config.json of each model; see
shared/reference/facts.md), so `num_params()` reproduces the official
parameter counts exactly. This module is pure Python: it imports no torch, so
the cost model can use it anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a Llama-architecture decoder.

    Attention has `n_heads` query heads and `n_kv_heads` key/value heads
    (grouped-query attention when n_kv_heads < n_heads), each `head_dim` wide.
    The MLP is SwiGLU with hidden width `d_ff`. With `tie_embeddings` the LM head
    reuses the embedding matrix instead of owning one.
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    rope_theta: float
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    max_seq_len: int = 8192

    def __post_init__(self):
        for field in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                      "vocab_size", "max_seq_len"):
            if getattr(self, field) < 1:
                raise ValueError(f"ModelConfig.{field} must be a positive integer, got {getattr(self, field)}.")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads}): "
                "in grouped-query attention each key/value head serves a whole group of query heads.")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}.")

    # --- parameter counts -------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the query projection's output: n_heads * head_dim."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection's output: n_kv_heads * head_dim."""
        return self.n_kv_heads * self.head_dim

    def layer_params(self) -> dict[str, int]:
        """Parameters of one transformer block, by weight (no biases in this family)."""
        d = self.d_model
        return {
            "attention_norm": d,
            "wq": d * self.q_dim,
            "wk": d * self.kv_dim,
            "wv": d * self.kv_dim,
            "wo": self.q_dim * d,
            "ffn_norm": d,
            "w1": d * self.d_ff,  # gate
            "w3": d * self.d_ff,  # up
            "w2": self.d_ff * d,  # down
        }

    def num_params(self) -> int:
        """Every parameter, counted once: embedding, blocks, final norm and (if untied) LM head."""
        embedding = self.vocab_size * self.d_model
        lm_head = 0 if self.tie_embeddings else self.vocab_size * self.d_model
        return embedding + self.n_layers * sum(self.layer_params().values()) + self.d_model + lm_head

    def with_(self, **changes) -> "ModelConfig":
        """A copy with some fields changed, e.g. `cfg.with_(n_layers=2)`."""
        return replace(self, **changes)


PRESETS: dict[str, ModelConfig] = {
    cfg.name: cfg
    for cfg in [
        ModelConfig("smollm2-135m", n_layers=30, d_model=576, n_heads=9, n_kv_heads=3, head_dim=64,
                    d_ff=1536, vocab_size=49152, rope_theta=100000.0, tie_embeddings=True, max_seq_len=8192),
        ModelConfig("smollm2-360m", n_layers=32, d_model=960, n_heads=15, n_kv_heads=5, head_dim=64,
                    d_ff=2560, vocab_size=49152, rope_theta=100000.0, tie_embeddings=True, max_seq_len=8192),
        ModelConfig("smollm2-1.7b", n_layers=24, d_model=2048, n_heads=32, n_kv_heads=32, head_dim=64,
                    d_ff=8192, vocab_size=49152, rope_theta=130000.0, tie_embeddings=True, max_seq_len=8192),
        ModelConfig("llama-3-8b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, head_dim=128,
                    d_ff=14336, vocab_size=128256, rope_theta=500000.0, max_seq_len=8192),
        ModelConfig("llama-3-70b", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, head_dim=128,
                    d_ff=28672, vocab_size=128256, rope_theta=500000.0, max_seq_len=8192),
        ModelConfig("llama-3.1-405b", n_layers=126, d_model=16384, n_heads=128, n_kv_heads=8, head_dim=128,
                    d_ff=53248, vocab_size=128256, rope_theta=500000.0, max_seq_len=131072),
        ModelConfig("mistral-7b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, head_dim=128,
                    d_ff=14336, vocab_size=32000, rope_theta=10000.0, max_seq_len=32768),
        # Small enough for unit tests to run in milliseconds, yet every mechanism is
        # present: several layers, grouped-query attention, tied embeddings.
        ModelConfig("tiny", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16,
                    d_ff=128, vocab_size=256, rope_theta=10000.0, tie_embeddings=True, max_seq_len=256),
    ]
}


def get_config(preset: "str | ModelConfig") -> ModelConfig:
    """Return the preset called `preset` (or `preset` itself if it is already a config)."""
    if isinstance(preset, ModelConfig):
        return preset
    if not isinstance(preset, str) or preset not in PRESETS:
        raise ValueError(
            f"Unknown model preset {preset!r}. Valid names: {', '.join(PRESETS)}. "
            "Or pass a ModelConfig of your own.")
    return PRESETS[preset]

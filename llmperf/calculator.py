"""What will a model do on an accelerator? The roofline's prediction of one served batch, from the cost model.

Pure Python (no torch), so the same code runs in a reader's browser on the
calculator page (`llmperf.explore`). A `Setup` is `batch` requests, each with a
`prompt`-token prompt and an `answer`-token answer, served together by one model
on `devices` accelerators. `predict` times every pass at the roofline: each part
of a pass (`cost.decode_parts`: the weight products, then attention) takes
max(FLOPs / peak, bytes / bandwidth), one part after the other
(`accelerators.roofline_time_in_parts`). It is a floor: kernels that reach the
roofs, no launch overheads, no scheduler.

What each figure counts:

- TTFT: the batch's prompts prefilled together in one pass, as a static batch
  starts (causal attention; logits for each prompt's last position only).
- TPOT: the mean of the two decode steps at the answer's middle, contexts
  prompt + ⌊answer / 2⌋ and prompt + ⌈answer / 2⌉. A step's time grows
  linearly with its context, so that is the mean of all answer − 1 steps.
- E2E = TTFT + (answer − 1) · TPOT: the first token comes from the prefill.
- Tokens/s per user = 1 / TPOT; for the whole batch, batch / TPOT.
- KV cache: every layer's key and value for prompt + answer tokens.
- The largest batch that fits: the KV caches of whole requests that fit in the
  server's share of memory (`UTILISATION`, vLLM's default) less the weights.
- Devices > 1: tensor parallelism at its ideal, every roof and the memory times
  `devices` (`gang`); the all-reduces between devices are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import cost
from .accelerators import ACCELERATORS, Accelerator, roofline_time_in_parts
from .config import get_config

DTYPES = {"float32": 4, "bfloat16": 2, "fp8": 1}
"""Bytes per element of the weight and KV-cache dtypes the calculator offers."""

UTILISATION = 0.9
"""The share of a device's memory a server takes for weights and KV cache: vLLM's --gpu-memory-utilization."""


def gang(hw: Accelerator, devices: int) -> Accelerator:
    """`devices` copies of `hw` as one: peak, bandwidth and memory all times `devices` (ideal tensor
    parallelism: no time for the all-reduces between them). One device is `hw` itself."""
    if devices == 1:
        return hw
    return Accelerator(f"{devices} × {hw.name}", devices * hw.flops, devices * hw.bandwidth, devices * hw.memory,
                       f"{devices} × ({hw.source}); communication not counted")


@dataclass(frozen=True)
class Setup:
    """One served batch: `batch` requests of `prompt` prompt tokens and `answer` answer tokens each, by the
    preset `model`, on `devices` × `accelerator`, with weights and KV cache in the named `DTYPES`."""

    model: str
    accelerator: Accelerator
    batch: int = 1
    prompt: int = 512
    answer: int = 256
    weight_dtype: str = "bfloat16"
    kv_dtype: str = "bfloat16"
    devices: int = 1

    def __post_init__(self):
        cfg = get_config(self.model)
        for name in ("batch", "prompt", "answer", "devices"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}.")
        for name in ("weight_dtype", "kv_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"{name} must be one of {', '.join(DTYPES)}, got {getattr(self, name)!r}.")
        if self.prompt + self.answer > cfg.max_seq_len:
            raise ValueError(f"prompt + answer is {self.prompt + self.answer:,} tokens, more than {cfg.name}'s "
                             f"context of {cfg.max_seq_len:,} tokens.")

    @property
    def cfg(self):
        return get_config(self.model)

    @property
    def hw(self) -> Accelerator:
        """The devices as one accelerator (`gang`)."""
        return gang(self.accelerator, self.devices)

    @property
    def wbytes(self) -> int:
        return DTYPES[self.weight_dtype]

    @property
    def kvbytes(self) -> int:
        return DTYPES[self.kv_dtype]


def prefill_parts(s: Setup) -> dict[str, cost.OpCost]:
    """The prefill of the batch's prompts in one pass, in the two parts `cost.decode_parts` splits a step into:
    the weight products (every prompt position through the projections, each prompt's last through the LM
    head; every weight read once) and causal attention (writing every position's key and value)."""
    cfg, b, p = s.cfg, s.batch, s.prompt
    f = cost.prefill_flops(cfg, p, b, attention="causal", logits_for=1)
    weights = cost.decode_bytes(cfg, 1, 1, s.wbytes).weights
    kv = b * p * cost.kv_bytes_per_token(cfg, s.kvbytes)
    return {"weights": cost.OpCost("weights", f.matmul, weights, 1),
            "attention": cost.OpCost("attention", f.attention, kv, 1)}


def middle_context(s: Setup) -> int:
    """The context of the answer's middle decode step (the new token counted), rounded down:
    prompt + ⌊answer / 2⌋. The intensity is that step's."""
    return s.prompt + s.answer // 2


def step_time(s: Setup) -> float:
    """Seconds of the answer's mean decode step: the mean of the steps at contexts prompt + ⌊answer / 2⌋ and
    prompt + ⌈answer / 2⌉, whose mean context is that of all the answer's steps."""
    contexts = (s.prompt + s.answer // 2, s.prompt + (s.answer + 1) // 2)
    return sum(roofline_time_in_parts(cost.decode_parts(s.cfg, c, s.batch, s.wbytes, s.kvbytes), s.hw)
               for c in contexts) / 2


@dataclass(frozen=True)
class Prediction:
    """`predict`'s figures for one `Setup`, in seconds, bytes, tokens/s and FLOPs per byte."""

    setup: Setup
    ttft: float
    tpot: float
    kv_per_sequence: int
    weights: int
    usable: float
    intensity: float

    @property
    def e2e(self) -> float:
        return self.ttft + (self.setup.answer - 1) * self.tpot

    @property
    def user_rate(self) -> float:
        return 1 / self.tpot

    @property
    def batch_rate(self) -> float:
        return self.setup.batch / self.tpot

    @property
    def kv_batch(self) -> int:
        return self.setup.batch * self.kv_per_sequence

    @property
    def max_batch(self) -> int:
        """Whole requests whose KV caches fit beside the weights in the server's share (0: the weights alone
        do not fit)."""
        return max(0, int((self.usable - self.weights) // self.kv_per_sequence))

    @property
    def ridge(self) -> float:
        return self.setup.hw.ridge

    @property
    def bound(self) -> str:
        """"compute" when the middle step's intensity reaches the ridge point, else "memory"."""
        return "compute" if self.intensity >= self.ridge else "memory"

    @property
    def fits(self) -> bool:
        return self.setup.batch <= self.max_batch


def predict(s: Setup) -> Prediction:
    """The roofline's figures for `s` (see the module's docstring for what each counts)."""
    cfg = s.cfg
    context = middle_context(s)
    return Prediction(
        setup=s,
        ttft=roofline_time_in_parts(prefill_parts(s), s.hw),
        tpot=step_time(s),
        kv_per_sequence=cost.kv_cache_bytes(cfg, s.prompt + s.answer, 1, s.kvbytes),
        weights=cost.weight_bytes(cfg, s.wbytes),
        usable=UTILISATION * s.hw.memory,
        intensity=cost.decode_intensity(cfg, context, s.batch, s.wbytes, s.kvbytes),
    )


def accelerator(name: str, extra: "dict[str, Accelerator] | None" = None) -> Accelerator:
    """The row called `name` of `ACCELERATORS`, or of `extra` (probed devices), with a clear error if none."""
    rows = {**ACCELERATORS, **(extra or {})}
    if name not in rows:
        raise ValueError(f"Unknown accelerator {name!r}. Known: {', '.join(rows)}.")
    return rows[name]

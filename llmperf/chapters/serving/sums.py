"""The chapter's arithmetic on a real deployment (no measurement): Little's Law sizing the KV cache of
Llama-3-8B on one H100, the quoted claim "15,000 tokens/s, but 12 per user" checked against the roofline
and against gpt-fast's published batch-1 rate, and the exercises' numbers.

Memory, throughout: the bytes the device's driver reports (an H100 sold as "80 GB" reports 81,559 MiB), of
which a server takes a fraction (`UTILISATION`, vLLM's default); the weights and the KV cache share it.
Activations and fragmentation are not counted: they take a little more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ... import cost, hardware, metrics
from ...calculator import UTILISATION  # the share of the device's memory a server takes (vLLM's default)

BF16 = 2  # bytes per weight and per cached key or value element
QUOTED_USER = 12  # tokens/s per user, as the quoted claim has it
PUBLISHED = "gpt-fast"  # the published batch-1 rate (hardware.PUBLISHED) that the claim's efficiency is set beside


@dataclass
class KVCapacity:
    """`rate` requests/s, each `latency` s end to end, served by `model` in bf16 on one `accelerator`: its
    memory as the driver reports it (bytes), the share of it a server takes, its weights' bytes, and the bytes
    one token's keys and values take in every layer."""

    model: str
    accelerator: str
    rate: float
    latency: float
    memory: float
    weights: float
    per_token: float
    utilisation: float = UTILISATION

    @property
    def usable(self) -> float:
        """Bytes the server takes of the device's memory."""
        return self.utilisation * self.memory

    @property
    def in_flight(self) -> float:
        """Little's Law: L = λ·W requests held at once."""
        return self.rate * self.latency

    @property
    def kv_free(self) -> float:
        """Bytes the weights leave the KV cache of the server's share (activations not counted)."""
        return self.usable - self.weights

    @property
    def tokens_each(self) -> float:
        """The most tokens of context each request in flight can hold."""
        return self.kv_free / self.in_flight / self.per_token

    def numbers(self) -> dict[str, object]:
        return {"kv_free_gb": self.kv_free / 1e9, "kv_token_kib": self.per_token / 1024,
                "tokens_each": self.tokens_each, "kv_rate": self.rate, "kv_latency": self.latency,
                "kv_in_flight": self.in_flight, "mem_mib": self.memory / 2**20, "mem_gb": self.memory / 1e9,
                "util_pct": 100 * self.utilisation, "usable_gb": self.usable / 1e9, "weights_gb": self.weights / 1e9}

    def table(self):
        rows = [(f"{self.accelerator} memory, as the driver reports it",
                 f"{self.memory / 2**20:,.0f} MiB = {self.memory / 1e9:.1f} GB"),
                (f"a server's share ({100 * self.utilisation:.0f} %, vLLM's --gpu-memory-utilization default)",
                 f"{self.usable / 1e9:.1f} GB"),
                (f"{self.model} weights, bf16", f"{self.weights / 1e9:.1f} GB"),
                ("left for the KV cache (activations not counted)", f"{self.kv_free / 1e9:.1f} GB"),
                ("one token's keys and values, every layer", f"{self.per_token / 1024:.0f} KiB"),
                (f"requests in flight: {self.rate:g} requests/s × {self.latency:g} s", f"{self.in_flight:.0f}"),
                ("tokens of context each, at most", f"{self.tokens_each:,.0f}")]
        return pd.DataFrame(rows, columns=["quantity", "value"]).style.hide(axis="index")


def kv_capacity(model: str = "llama-3-8b", accelerator: str = "H100 SXM", rate: float = 100,
                latency: float = 2.0) -> KVCapacity:
    """Little's Law sizing a KV cache: `rate` requests/s of `latency` s each (100 and 2 by default); Llama-3-8B
    in bf16 on one H100 SXM (memory as its driver reports it, `UTILISATION` of it taken by the server, vLLM's
    --gpu-memory-utilization default)."""
    return KVCapacity(model, accelerator, rate, latency, float(hardware.ACCELERATORS[accelerator].memory),
                      float(cost.weight_bytes(model, BF16)), float(cost.kv_bytes_per_token(model)))


@dataclass
class Claim:
    """"15,000 tokens/s at batch 256, 12 per user", for `prompt`-token prompts and `answer`-token answers on the
    deployment of `kv`: the roofline's decode step halfway through an answer, and one prompt's prefill (s); and
    the share of its own roofline's batch-1 rate that a published measurement reached (`PUBLISHED`)."""

    kv: KVCapacity
    batch: int
    claimed: float  # tokens/s of the whole server
    prompt: int
    answer: int
    step: float
    prefill_one: float
    published_share: float  # the published batch-1 tokens/s ÷ the roofline's, on the device it ran on

    @property
    def roof_total(self) -> float:
        """The roofline's tokens/s for the whole batch: `batch` tokens per decode step."""
        return self.batch / self.step

    @property
    def roof_share(self) -> float:
        """The claimed tokens/s as a share of the roofline's."""
        return self.claimed / self.roof_total

    @property
    def prefill_total(self) -> float:
        """The whole batch's tokens/s when every step also carries its share of the newcomers' prefills."""
        return self.batch / self.with_prefill

    @property
    def ctx(self) -> int:
        """Tokens of context halfway through an answer, on average."""
        return self.prompt + self.answer // 2

    @property
    def per_user_claimed(self) -> float:
        return self.claimed / self.batch

    @property
    def kv_each(self) -> float:
        """The most context each of `batch` sequences can hold in the KV cache (tokens)."""
        return self.kv.kv_free / self.batch / self.kv.per_token

    @property
    def newcomers(self) -> float:
        """Sequences that finish, and are replaced by a prefill, per decode step."""
        return self.batch / self.answer

    @property
    def with_prefill(self) -> float:
        """A decode step plus its share of newcomers' prefills (s)."""
        return self.step + self.newcomers * self.prefill_one

    @property
    def output_share(self) -> float:
        """The share of prompt and answer tokens that are answer."""
        return self.answer / (self.prompt + self.answer)

    def numbers(self) -> dict[str, object]:
        return {"ex_prompt": self.prompt, "ex_answer": self.answer, "per_user_claimed": self.per_user_claimed,
                "kv_each": self.kv_each, "ex_ctx": self.ctx, "step_ms": self.step * 1e3, "roof_user": 1 / self.step,
                "prefill_ms": self.prefill_one * 1e3, "prefill_user": 1 / self.with_prefill,
                "output_share_pct": 100 * self.output_share,
                "input_user": self.per_user_claimed * self.output_share, "claimed": self.claimed,
                "newcomers": self.newcomers, "claim_batch": self.batch, "claim_user_quoted": QUOTED_USER,
                "claim_user_total": QUOTED_USER * self.batch, "roof_total": self.roof_total,
                "roof_share_pct": 100 * self.roof_share, "prefill_total": self.prefill_total,
                "published_pct": 100 * self.published_share}

    def table(self):
        """The per-user rates each reading of the claim gives."""
        rows = [(f"as stated: {self.claimed:,.0f} tokens/s ÷ {self.batch}", self.per_user_claimed),
                (f"roofline decode step at batch {self.batch}, {self.ctx:,} tokens of context", 1 / self.step),
                (f"+ {self.newcomers:g} prefill of {self.prompt:,} tokens per step, on average (each finished "
                 "answer replaced)", 1 / self.with_prefill),
                (f"{self.claimed:,.0f} counting input tokens too: output is {self.answer}/{self.prompt + self.answer}"
                 " of it", self.per_user_claimed * self.output_share)]
        caption = (f"each of {self.batch} sequences can hold {self.kv_each:,.0f} tokens of KV cache on one "
                   f"{self.kv.accelerator}")
        return (pd.DataFrame(rows, columns=["reading", "tokens/s per user"]).style.format(precision=1)
                .hide(axis="index").set_caption(caption))

    def check(self) -> None:
        """What the prose says of the figures: 15,000 tokens/s over 256 users is 58.6 each, and 12 each would be
        3,072 in all; the interleaved prefills lower the whole batch's rate below the claim too, so they cannot
        bring both numbers together, while counting input tokens brings each user's within 20 % of 12; and the
        claim asks more of its roofline than the published batch-1 rate reached of its own."""
        assert round(self.claimed / self.batch, 1) == 58.6, f"{self.claimed} ÷ {self.batch} is not 58.6"
        assert QUOTED_USER * self.batch == 3072, f"{QUOTED_USER} tokens/s × {self.batch} users is not 3,072"
        assert self.prefill_total < self.claimed, \
            f"with the prefills the batch still makes {self.prefill_total:,.0f} tokens/s, not below {self.claimed:,.0f}"
        assert self.prompt + self.answer <= self.kv_each, \
            f"{self.prompt} + {self.answer} tokens do not fit the {self.kv_each:,.0f} each sequence may hold"
        input_user = self.per_user_claimed * self.output_share
        assert abs(input_user / QUOTED_USER - 1) < 0.2, f"counting input tokens gives {input_user:.1f} tokens/s each"
        assert self.roof_share > self.published_share, \
            f"the claim is {self.roof_share:.0%} of its roofline, not above {PUBLISHED}'s {self.published_share:.0%}"


def claim_check(kv: KVCapacity, batch: int = 256, claimed: float = 15_000, prompt: int = 1024,
                answer: int = 256) -> Claim:
    """The quoted claim on `kv`'s model and accelerator, for an assumed workload (prompts four times the
    answers): the roofline time of one batch-`batch` decode step at `prompt + answer // 2` tokens of context,
    each part on its own roofline, and of one `prompt`-token prefill (logits for its last token only)."""
    hw = hardware.ACCELERATORS[kv.accelerator]
    ctx = prompt + answer // 2
    step = hardware.roofline_time_in_parts(cost.decode_parts(kv.model, ctx, batch=batch), hw)
    prefill = hardware.roofline_time(cost.prefill_flops(kv.model, prompt, logits_for=1).total,
                                     cost.decode_bytes(kv.model, prompt).total, hw)
    return Claim(kv, batch, claimed, prompt, answer, float(step), float(prefill), published_share(kv.model))


def published_share(model: str, name: str = PUBLISHED) -> float:
    """A published batch-1 decode rate (`hardware.PUBLISHED[name]`) as a share of the roofline's batch-1 rate for
    `model` (the same shapes as the published one) on the device it ran on, at one token of context."""
    published = hardware.PUBLISHED[name]
    hw = hardware.ACCELERATORS[published.device]
    floor = hardware.roofline_time(cost.decode_flops(model, 1).total, cost.decode_bytes(model, 1).total, hw)
    return published.tokens_per_s * floor


def exercise_numbers(kv: KVCapacity) -> dict[str, object]:
    """The exercises' numbers: Little's Law sizing a service on `kv`'s deployment (50 requests/s of 2,000 +
    500 tokens, 10 s each), mean TPOT against mean ITL for two requests, and nearest-rank positions."""
    rate, prompt, answer, latency = 50, 2000, 500, 10.0
    in_flight, ctx = rate * latency, prompt + answer
    kv_total = in_flight * ctx * kv.per_token
    short, long = 20, 50  # ms: one 2-token answer's gap, and each of a 101-token answer's 100 gaps
    pair = [metrics.RequestTimes(0.0, [0.1, 0.1 + short / 1e3]),
            metrics.RequestTimes(0.0, [0.1 + i * long / 1e3 for i in range(101)])]
    gaps = [g for t in pair for g in t.itl]
    return {"ex_rate": rate, "ex_prompt_tokens": prompt, "ex_answer_tokens": answer, "ex_latency": latency,
            "ex_in_flight": in_flight, "ex_ctx_tokens": ctx, "ex_kv_each_mb": ctx * kv.per_token / 1e6,
            "ex_kv_avg_pct": 100 * (prompt + answer / 2) / ctx,
            "ex_kv_total_gb": kv_total / 1e9, "ex_gpus": math.ceil(kv_total / kv.kv_free),
            "ex_gap_short": short, "ex_gap_long": long,
            "ex_tpot_mean": sum(t.tpot for t in pair) / len(pair) * 1e3, "ex_itl_mean": sum(gaps) / len(gaps) * 1e3,
            "ex_rank99": math.ceil(0.99 * 40), "ex_rank90": math.ceil(0.90 * 40),
            "ex_n_tail": next(n for n in range(1, 1000) if math.ceil(0.99 * n) < n)}

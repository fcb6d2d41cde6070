"""Chapter 1's three ways out of the chain, one pass each: a cheaper pass (the other dtype), more per pass (a
batch), more than one token per pass; the sentence chosen from the first, and the exercises' numbers."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from ... import cost, hardware
from ...device import dtype_name
from ...profiling import time_forward
from ..setup import Setup
from ...wording import SAME, speed_change
from .latency import LatencyLine


@dataclass
class WaysOut:
    """One pass of each way out, against a plain decode step at the chapter's prompt length.

    passes: name -> {"bytes": bytes the pass reads (weights once, a cache per sequence), "seconds": the fastest
    of its runs, "tokens": tokens it produces}. `base` is the plain step's name, `float32`/`bfloat16` the
    names of the one-step passes in each dtype; `read_bandwidth` (bytes/s) the probe's, for the prediction.
    """

    dtype: str
    batch: int
    k: int
    passes: dict[str, dict[str, float]]
    read_bandwidth: float

    @property
    def base(self) -> str:
        return f"one step, {self.dtype}"

    def ratio(self, name: str, what: str) -> float:
        """`name`'s bytes or seconds (`what`) ÷ the plain step's."""
        return self.passes[name][what] / self.passes[self.base][what]

    @property
    def batch_name(self) -> str:
        return f"one step, batch {self.batch}"

    @property
    def multi_name(self) -> str:
        return f"one pass over {self.k} new tokens"

    def table(self):
        import pandas as pd

        rows = [{"pass": name, "bytes (MB)": w["bytes"] / 1e6, "predicted ×": self.ratio(name, "bytes"),
                 "measured ×": self.ratio(name, "seconds"), "tokens/s": w["tokens"] / w["seconds"]}
                for name, w in self.passes.items()]
        return pd.DataFrame(rows).style.format({"bytes (MB)": "{:.0f}", "predicted ×": "{:.2f}",
                                                "measured ×": "{:.2f}", "tokens/s": "{:.1f}"}).hide(axis="index")

    def numbers(self) -> dict:
        f32, bf16 = self.passes["one step, float32"], self.passes["one step, bfloat16"]
        f32_share = f32["bytes"] / f32["seconds"] / self.read_bandwidth
        return {"bf16_text": halved_bytes(f32["seconds"], bf16["seconds"], f32_share), "batch": self.batch,
                "batch_step_ratio": self.ratio(self.batch_name, "seconds"),
                "batch_pred_ratio": self.ratio(self.batch_name, "bytes"),
                "batch_tps_gain": self.batch / self.ratio(self.batch_name, "seconds"), "k": self.k,
                "multi_ratio": self.ratio(self.multi_name, "seconds"),
                "multi_pred_ratio": self.ratio(self.multi_name, "bytes")}


def measure_ways_out(s: Setup) -> WaysOut:
    """Time one pass of each: a plain decode step in the chapter's dtype and in the other one (float32 or
    bfloat16), a step for a batch of `s.sizes.chain_batch`, and one cached pass over `s.sizes.chain_multi_token`
    new tokens; probe the read bandwidth for the bytes' prediction."""
    B, k, ctx = s.sizes.chain_batch, s.sizes.chain_multi_token, s.sizes.chain_prompt
    other_dtype = torch.float32 if s.dtype != torch.float32 else torch.bfloat16
    model_other = copy.deepcopy(s.model).to(other_dtype)
    to_time = {  # name: (model, batch, new tokens per sequence)
        f"one step, {dtype_name(s.dtype)}": (s.model, 1, 1),
        f"one step, {dtype_name(other_dtype)}": (model_other, 1, 1),
        f"one step, batch {B}": (s.model, B, 1),
        f"one pass over {k} new tokens": (s.model, 1, k),
    }
    passes = {}
    for name, (m, b, n) in to_time.items():
        seconds = time_forward(m, batch=b, new_tokens=n, context=ctx, all_logits=True, repeat=5 * s.sizes.repeat).min
        # Bytes the pass reads: the weights once, each sequence's cache (n new keys and values instead of one
        # make no visible difference).
        passes[name] = {"bytes": cost.decode_bytes(s.model.cfg, ctx + n, b, m.dtype.itemsize).total,
                        "seconds": seconds, "tokens": b * n}
    del model_other
    read = hardware.measure_bandwidth(s.device)["read"]
    return WaysOut(dtype_name(s.dtype), B, k, passes, read)


def exercise_numbers(line: LatencyLine, ways_out: WaysOut, answer_tokens: int = 500,
                     accepted_per_pass: float = 2.5) -> dict:
    """The exercises' givens and answers, from this machine's fit: a long answer's time (and with a step twice
    as fast), twice the longest run, and speculative decoding's tokens per step's worth of time."""
    n_long, ttft = 2 * line.Ns[-1], line.ingredients.ttft
    return {"ex_tokens": answer_tokens, "ex_tokens_less_1": answer_tokens - 1, "ex_accepted": accepted_per_pass,
            "ex_t500": ttft + (answer_tokens - 1) * line.slope,
            "ex_t500_fast": ttft + (answer_tokens - 1) * line.slope / 2,
            "ex_spec": accepted_per_pass / ways_out.ratio(ways_out.multi_name, "seconds"),
            "ex_n_long": n_long, "ex_t_long": ttft + (n_long - 1) * line.slope}


# --- the sentences ----------------------------------------------------------------------------

def halved_bytes(t_float32: float, t_bfloat16: float, float32_share_of_bandwidth: float) -> str:
    """What storing the weights in bfloat16 did to a decode step, against what halving the bytes predicts.

    `float32_share_of_bandwidth` is the float32 step's bytes ÷ its time ÷ the probed read bandwidth:
    only a step near 1 was bound by the bytes, and only such a step should get about twice as fast.
    """
    ran = f"Here the bfloat16 step ran {speed_change(t_float32, t_bfloat16, 'the float32 one')}"
    speedup = t_float32 / t_bfloat16
    share = f"{100 * float32_share_of_bandwidth:.0f} %"
    if float32_share_of_bandwidth >= 0.6:  # the float32 step was bound by the bytes
        if 1.6 <= speedup <= 2.4:
            return f"{ran}, as the bytes predict: the float32 step drew {share} of the probed bandwidth"
        if speedup > 2.4:
            return (f"{ran}, more than halving the bytes predicts, though the float32 step drew {share} of the "
                    "probed bandwidth: the bfloat16 kernels streamed their half of the bytes faster than the "
                    "float32 kernels streamed theirs, so the float32 step was not wholly bound by its bytes")
        return (f"{ran}, though the float32 step drew {share} of the probed bandwidth: the bfloat16 kernels did "
                "not stream their half of the bytes at the same rate")
    if speedup < 1 - SAME:
        return (f"{ran}. The float32 step drew only {share} of the probed bandwidth, so the bytes did not set its "
                "time, and this processor's bfloat16 kernels cost more than the halved bytes save")
    return (f"{ran}. The float32 step drew only {share} of the probed bandwidth, so the bytes did not set its "
            "time: the bytes halved, but the time followed the kernels' work, not the bytes")

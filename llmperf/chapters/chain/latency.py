"""Chapter 1's chain and its latency: decode steps by hand, TTFT + (N − 1)·t_step against whole generations,
and a prefill against a decode of the same tokens."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ... import cost
from ...fit import linear_fit
from ...generation import decode_step, generate, new_cache, prefill, stream
from ...metrics import RequestTimes
from ...profiling import forward_fn, time_forward
from ...timing import time_in_turns
from ..setup import Setup, random_prompt
from .claims import slope_text

SLOPE_TOLERANCE = 0.25  # how far the fitted slope may sit from the step time before the chapter fails
MIN_R2 = 0.95  # R² alone cannot tell a line from a gentle curve over five points; the slope check does the real work
MIN_DECODE_OVER_PREFILL = 3.0  # a decode of N tokens against a prefill of N: at least this many times longer


# --- the chain, one link at a time ------------------------------------------------------------

@dataclass
class ChainLinks:
    """Decode steps run by hand: the token each step was fed and the one it produced, as text; and the KV cache
    they ran on, allocated before the first step for `capacity` positions (`cache_bytes`: its buffers' bytes)."""

    prompt: str
    positions: list[int]
    fed: list[str]
    came_out: list[str]
    capacity: int
    cache_bytes: int

    def table(self):
        import pandas as pd

        return pd.DataFrame({"step": range(1, len(self.positions) + 1), "position": self.positions,
                             "fed in": [repr(t) for t in self.fed], "came out": [repr(t) for t in self.came_out]}
                            ).style.hide(axis="index")

    def numbers(self) -> dict:
        return {"chain_steps": len(self.positions), "chain_capacity": self.capacity,
                "chain_cache_kb": self.cache_bytes / 1e3}

    def check(self) -> None:
        assert self.fed[1:] == self.came_out[:-1], "each step must be fed the token the step before it produced"


def show_chain(s: Setup, prompt: str = "The three primary colours are", steps: int = 5) -> ChainLinks:
    """Prefill `prompt`, then run `steps` greedy decode steps one by one, recording what each was fed."""
    ids = s.tokenizer.encode(prompt)
    cache = new_cache(s.model, 1, len(ids) + steps)  # allocated once, at its full length, before the first step
    positions, fed, came_out = [], [], []
    with torch.inference_mode():
        token = prefill(s.model, torch.tensor([ids], device=s.device), cache).argmax(-1, keepdim=True)  # (1, 1)
        for pos in range(len(ids), len(ids) + steps):
            positions.append(pos)
            fed.append(s.tokenizer.decode(token[0]))
            token = decode_step(s.model, token, pos, cache).argmax(-1, keepdim=True)
            came_out.append(s.tokenizer.decode(token[0]))
    return ChainLinks(prompt, positions, fed, came_out, cache.capacity, cache.nbytes)


# --- end-to-end time against N ----------------------------------------------------------------

@dataclass
class Ingredients:
    """The prediction's two ingredients at a `prompt_len`-token prompt: TTFT (a prefill and its first token) and
    one decode step, in seconds, the fastest of their runs."""

    prompt_len: int
    ttft: float
    t_step: float

    def numbers(self) -> dict:
        return {"P": self.prompt_len, "ttft_ms": self.ttft * 1e3, "step_ms": self.t_step * 1e3}


def measure_ingredients(s: Setup) -> Ingredients:
    """TTFT and one decode step at `s.sizes.chain_prompt` tokens, timed in turns."""
    P = s.sizes.chain_prompt
    prompt = random_prompt(s.model.cfg.vocab_size, P)
    runs = time_in_turns({"ttft": lambda: generate(s.model, prompt, 1), "step": forward_fn(s.model, context=P)},
                             rounds=5 * s.sizes.repeat, device=s.device)
    return Ingredients(P, runs["ttft"].min, runs["step"].min)


@dataclass
class LatencyLine:
    """generate() of N tokens for each N, against the prediction TTFT + (N − 1)·t_step from `ingredients`.

    e2e[i]: seconds for Ns[i] tokens, the fastest of its runs. t_step_sweep: one step, from a block of `block`
    bare steps timed in the same rounds as the sweep. slope, intercept, r2: the least-squares line through
    (Ns, e2e). context_growth: the cost model's extra bytes of the longest run's average step (`extra_positions`
    more positions than the bare step) over the bare step's, a fraction.
    """

    ingredients: Ingredients
    Ns: list[int]
    e2e: list[float]
    block: int
    t_step_sweep: float
    slope: float
    intercept: float
    r2: float
    slope_tolerance: float = SLOPE_TOLERANCE
    context_growth: float = 0.0
    extra_positions: int = 0

    @property
    def predicted(self) -> list[float]:
        """TTFT + (N − 1)·t_step for each N, from the two separate measurements."""
        return [self.ingredients.ttft + (n - 1) * self.ingredients.t_step for n in self.Ns]

    def line(self, n):
        """The fitted line's end-to-end time (seconds) at N = n (a number or an array)."""
        return self.intercept + self.slope * n

    @property
    def slope_vs_step(self) -> float:
        return self.slope / self.t_step_sweep

    def table(self):
        import pandas as pd

        df = pd.DataFrame({"N": self.Ns, "measured (s)": self.e2e, "predicted (s)": self.predicted})
        df["measured ÷ predicted"] = df["measured (s)"] / df["predicted (s)"]
        return df.style.format({"measured (s)": "{:.3f}", "predicted (s)": "{:.3f}",
                                "measured ÷ predicted": "{:.2f}"}).hide(axis="index")

    def numbers(self) -> dict:
        return {"fit_slope_ms": self.slope * 1e3, "fit_r2": self.r2, "slope_vs_step": self.slope_vs_step,
                "block": self.block, "sweep_step_ms": self.t_step_sweep * 1e3,  # the bare step the slope is set against
                "slope_tol_pct": 100 * self.slope_tolerance,
                "slope_text": slope_text(self.slope_vs_step, self.context_growth, self.extra_positions)}

    def check(self) -> None:
        assert self.r2 >= MIN_R2, f"end-to-end time is not linear in N: R² = {self.r2:.4f}"
        assert abs(self.slope_vs_step - 1) <= self.slope_tolerance, (
            f"the fitted slope is {self.slope_vs_step:.2f}x the measured step (allowed: 1 ± {self.slope_tolerance})")


def measure_latency_line(s: Setup, ingredients: Ingredients, new_tokens=None) -> LatencyLine:
    """generate() for each N of `new_tokens` (default `s.sizes.chain_new_tokens`) after the ingredients' prompt
    (greedy, no stop token: exactly N tokens each), fitted with a line.

    Each N takes its turn round after round, so a burst of other work lands on one run of several N, not on
    every run of one N. A block of bare decode steps as long as the longest generation takes its turn too:
    the slope is compared with the step as measured over the same stretch of time.
    """
    Ns = sorted(new_tokens or s.sizes.chain_new_tokens)
    if len(Ns) < 3 or Ns[0] < 1:
        raise ValueError(f"A line through the sweep needs at least 3 token counts of 1 or more, got {Ns}.")
    if ingredients.prompt_len + Ns[-1] > s.model.cfg.max_seq_len:
        raise ValueError(f"{ingredients.prompt_len} prompt tokens + {Ns[-1]} new ones exceed {s.model.cfg.name}'s "
                         f"{s.model.cfg.max_seq_len} positions.")
    prompt = random_prompt(s.model.cfg.vocab_size, ingredients.prompt_len)
    block = Ns[-1]
    step_fn = forward_fn(s.model, context=ingredients.prompt_len)
    fns = {n: (lambda n=n: generate(s.model, prompt, n)) for n in Ns}
    fns["steps"] = lambda: [step_fn() for _ in range(block)]
    runs = time_in_turns(fns, rounds=s.sizes.repeat, warmup=0, device=s.device, desc="generate N tokens")
    e2e = [runs[n].min for n in Ns]
    fit = linear_fit(Ns, e2e)
    cfg, P, extra, size = s.model.cfg, ingredients.prompt_len, Ns[-1] // 2, s.model.dtype.itemsize
    growth = cost.decode_bytes(cfg, P + extra, 1, size).total / cost.decode_bytes(cfg, P, 1, size).total - 1
    return LatencyLine(ingredients, Ns, e2e, block, runs["steps"].min / block, fit.slope, fit.intercept, fit.r2,
                       context_growth=growth, extra_positions=extra)


# --- same FLOPs, different time ---------------------------------------------------------------

@dataclass
class SameFlops:
    """A prefill of N tokens (one pass, logits at every position) against a decode of N tokens (N passes of one,
    streamed after a first token), FLOPs from the cost model and seconds the fastest of their runs."""

    N: int
    prefill_matmul: int
    prefill_total: int
    decode_matmul: int
    decode_total: int
    t_prefill: float
    t_decode: float

    @property
    def decode_over_prefill(self) -> float:
        return self.t_decode / self.t_prefill

    def table(self):
        import pandas as pd

        rows = [("prefill: 1 pass × N tokens", self.prefill_matmul, self.prefill_total, self.t_prefill),
                ("decode: N passes × 1 token", self.decode_matmul, self.decode_total, self.t_decode)]
        df = pd.DataFrame([{"": name, "matmul (GFLOP)": m / 1e9, "total (GFLOP)": t / 1e9, "time (ms)": sec * 1e3,
                            "GFLOP/s": t / sec / 1e9} for name, m, t, sec in rows])
        return df.style.format({"matmul (GFLOP)": "{:.2f}", "total (GFLOP)": "{:.2f}", "time (ms)": "{:.0f}",
                                "GFLOP/s": "{:.1f}"}).hide(axis="index")

    def numbers(self) -> dict:
        return {"N_cmp": self.N, "prefill_gflop": self.prefill_matmul / 1e9,
                "t_prefill_ms": self.t_prefill * 1e3, "t_decode_ms": self.t_decode * 1e3,
                "decode_over_prefill": self.decode_over_prefill,
                "prefill_gflops": self.prefill_total / self.t_prefill / 1e9,
                "decode_gflops": self.decode_total / self.t_decode / 1e9}

    def check(self) -> None:
        assert self.decode_matmul == self.prefill_matmul, "prefill and decode of N tokens do identical matmul FLOPs"
        assert self.t_decode >= MIN_DECODE_OVER_PREFILL * self.t_prefill, (
            f"decoding {self.N} tokens took only {self.decode_over_prefill:.1f}x a prefill of {self.N} tokens "
            f"(expected >= {MIN_DECODE_OVER_PREFILL:.0f}x)")


def measure_same_flops(s: Setup, N: int) -> SameFlops:
    """Count and time a prefill of N tokens and a decode of the N tokens after a first one, at the chapter's
    prompt length (the decode's context grows from it)."""
    cfg, P = s.model.cfg, s.sizes.chain_prompt
    prompt = random_prompt(cfg.vocab_size, P)
    prefill_f = cost.prefill_flops(cfg, N)  # one pass over N tokens, logits at every position
    decode_f = [cost.decode_flops(cfg, context=P + i) for i in range(1, N + 1)]  # N passes, one token each
    t_prefill = time_forward(s.model, new_tokens=N, all_logits=True, repeat=3 * s.sizes.repeat).min
    decode_runs = []
    for _ in range(s.sizes.repeat):
        request = RequestTimes(time.perf_counter(), [t for _, t in stream(s.model, prompt, N + 1)])
        decode_runs.append(request.e2e - request.ttft)  # the N tokens after the first
    return SameFlops(N, prefill_f.matmul, prefill_f.total, sum(f.matmul for f in decode_f),
                     sum(f.total for f in decode_f), t_prefill, min(decode_runs))


def explore_view(line: LatencyLine):
    """The latency line predicted for any model and accelerator (`llmperf.explore`), with this machine's
    measured end-to-end times as markers: Llama-3-8B on an H100 to start, at this chapter's prompt length."""
    from ...explore import page

    return page.embed("latency", inputs={"prompt": line.ingredients.prompt_len, "answer": max(line.Ns)},
                      measured=[{"label": "SmolLM2 on this machine, measured", "x": line.Ns, "y": line.e2e}])

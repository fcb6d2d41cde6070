"""Chapter 5's whole steps timed without a profiler, and what changes their fixed costs.

- `measure_fixed_cost`: one tiny op's fixed cost (`hardware.measure_op_overhead`), and
  the plain and the fused model's steps, timed in turns;
- `replay_step`: the step eager, replayed from a CUDA Graph and through
  torch.compile(mode="reduce-overhead"), on a GPU only;
- `time_sampling`: greedy decoding and temperature + top-k sampling over one step's scores;
- `measure_half_precision`: on a processor, the half-precision features it reports and the
  rate of one-row products in each dtype (`hardware.measure_one_row_products`).

Each record that needs a device the run lacks says so in `skipped`, and its sentence says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ... import hardware
from ...device import cpu_half_precision, dtype_name
from ...generation import sample
from ...profiling import compiled_step, cuda_graph_step, forward_fn, op_counts
from ...timing import time_calls, time_in_turns
from ...wording import speed_change
from . import claims, labels
from .profiled import Profile


@dataclass
class FixedCost:
    """One tiny op's time (`op`, seconds: all fixed cost), and the median decode step of the plain model and of
    the fused one (`llmperf.fast.fuse`), with the ops each dispatches and the step's bytes ÷ bandwidth."""

    device: str
    op: float
    plain: float
    fused: float
    plain_ops: float
    fused_ops: float
    bandwidth_time: float
    fused_in_numpy: bool  # the fused step ran as NumPy code (float32 on a processor), unseen by the profiler

    def steps(self) -> dict[str, tuple[float, float]]:
        """{step: (seconds, ops)} for the plain and the fused model."""
        return {"plain model": (self.plain, self.plain_ops), "fuse(model)": (self.fused, self.fused_ops)}

    def numbers(self) -> dict[str, object]:
        overhead = self.plain_ops * self.op
        return {"t_op_us": self.op * 1e6, "overhead_ms": overhead * 1e3, "t_plain_ms": self.plain * 1e3,
                "fixed_text": claims.fixed_costs(overhead, self.plain - self.bandwidth_time, self.bandwidth_time,
                                                 gpu=self.device == "cuda"),
                "plain_multiple_text": claims.roofline_multiple(self.plain / self.bandwidth_time,
                                                                "The plain model's step"),
                "fused_multiple": self.fused / self.bandwidth_time,
                "fused_ops_text": claims.fused_ops(self.plain_ops, self.fused_ops, in_numpy=self.fused_in_numpy),
                "fused_speed_text": speed_change(self.plain, self.fused, "the plain model's")}

    def table(self):
        import pandas as pd

        df = pd.DataFrame([{"step": name, "measured (ms)": t * 1e3, "bytes/BW (ms)": self.bandwidth_time * 1e3,
                            "× bytes/BW": t / self.bandwidth_time, "ops": n,
                            "ops × fixed cost (ms)": n * self.op * 1e3} for name, (t, n) in self.steps().items()])
        return df.style.format({"measured (ms)": "{:.3f}", "bytes/BW (ms)": "{:.3f}", "× bytes/BW": "{:.2f}",
                                "ops": "{:,.0f}", "ops × fixed cost (ms)": "{:.3f}"}).hide(axis="index")

    def check(self) -> None:
        # 6. A real step is no faster than its bytes at the probed bandwidth (10 % for the probe's own error).
        assert self.plain > 0.9 * self.bandwidth_time, (self.plain, self.bandwidth_time)


def measure_fixed_cost(s, fused, profile: Profile) -> FixedCost:
    """Time one tiny op, then the plain model's step and `fused`'s (`fuse(s.model)`) after
    `s.sizes.decode_context` tokens in turns, 3 × `s.sizes.repeat` rounds, so that noise hits both alike;
    three untimed steps before each timed one, since the fused model's BLAS threads keep spinning for a
    moment after a step. The plain step's ops are `profile`'s; the fused step's are counted here."""
    ctx = s.sizes.decode_context
    op = hardware.measure_op_overhead(s.device)
    pair = time_in_turns({"plain": forward_fn(s.model, context=ctx), "fused": forward_fn(fused, context=ctx)},
                             rounds=3 * s.sizes.repeat, settle=3, device=s.device, desc="plain and fused steps")
    fused_ops = sum(op_counts(fused, context=ctx)["ops"].values())
    return FixedCost(s.device.type, float(op), float(pair["plain"].median), float(pair["fused"].median),
                     float(profile.ops), float(fused_ops), profile.bandwidth_time, fused.numpy_step is not None)


@dataclass
class Replay:
    """The step eager (static cache), replayed from a CUDA Graph and through torch.compile's reduce-overhead
    mode: median seconds, and the largest difference of each one's logits from eager's (`largest_logit`: the
    largest eager logit, for scale). `skipped` says why only `eager` (the plain step) is there: no CUDA."""

    device: str
    eager: float
    bandwidth_time: float
    graph: float | None = None
    compiled: float | None = None
    largest_logit: float | None = None
    graph_gap: float | None = None
    compiled_gap: float | None = None
    skipped: str | None = None

    @property
    def graph_matches(self) -> bool:
        """The graph's logits are eager's to bfloat16 rounding (1 % of the largest logit)."""
        return self.graph_gap is not None and self.graph_gap <= 1e-2 * self.largest_logit

    def numbers(self) -> dict[str, object]:
        return {"graph_text": claims.graph_result(self.device, self.eager, self.graph, self.compiled,
                                                  self.bandwidth_time)}

    def table(self, others=None):
        """This machine's three steps; where it has no CUDA, the GPU references' (`others`, the chapter's
        references.compare.Comparison), or one line saying that none is committed yet."""
        import pandas as pd

        if self.skipped:
            return _reference_steps(self.skipped, others)
        rows = [{"step": name, "time (ms)": t * 1e3, "× bytes/BW": t / self.bandwidth_time,
                 "largest logit difference from eager": gap}
                for name, t, gap in (("eager", self.eager, 0.0), ("CUDA Graph", self.graph, self.graph_gap),
                                     ("torch.compile", self.compiled, self.compiled_gap))]
        return (pd.DataFrame(rows).style.format({"time (ms)": "{:.3f}", "× bytes/BW": "{:.1f}",
                                                 "largest logit difference from eager": "{:.3g}"})
                .hide(axis="index"))

    def check(self) -> None:
        # 7. On a GPU, the replayed graph computes what the eager step does (to rounding), and faster.
        if self.skipped:
            return
        assert self.graph_matches and self.graph < self.eager, (self.graph_matches, self.graph, self.eager)


def _reference_steps(skipped: str, others):
    """The GPU references' eager, graph and compiled steps, in place of this machine's, which has no CUDA."""
    import pandas as pd

    from ...references.compare import show
    from ...references.results import ROWS
    from ...references.sentences import no_gpu_line

    gpus = [r for r in (others.refs if others is not None else []) if r.gpu]
    if not gpus:
        return (pd.DataFrame({"not measured on this machine": [f"{skipped}. {no_gpu_line()}"]})
                .style.hide(axis="index"))
    keys = ("kernels_per_step", "eager_ms", "graph_ms", "compiled_ms", "launch_removed_pct")
    rows = [row for row in ROWS["anatomy"] if row.key in keys]
    return pd.DataFrame({r.label: [show(row, r.results) for row in rows] for r in gpus},
                        index=pd.Index([row.heading for row in rows], name="on the GPU references"))


GRAPH_NEEDS = "CUDA Graphs and torch.compile's reduce-overhead mode need a CUDA device"


def replay_step(s, fixed: FixedCost) -> Replay:
    """On a CUDA device: the step after `s.sizes.decode_context` tokens eager, from a CUDA Graph and compiled
    (compiling takes tens of seconds), on the same random token, timed in turns over 5 × `s.sizes.repeat`
    rounds. Elsewhere nothing is measured, and `eager` is `fixed`'s plain step."""
    if s.device.type != "cuda":
        return Replay(s.device.type, fixed.plain, fixed.bandwidth_time,
                      skipped=f"{GRAPH_NEEDS}; this is {s.device.type}")
    ctx = s.sizes.decode_context
    torch.manual_seed(0)  # the same random token for all three
    eager = forward_fn(s.model, context=ctx, static=True)
    torch.manual_seed(0)
    graph = cuda_graph_step(s.model, context=ctx)
    torch.manual_seed(0)
    compiled = compiled_step(s.model, context=ctx)
    for _ in range(3):
        compiled()  # compile, record, replay
    reference = eager().float()
    gaps = [float((f().float() - reference).abs().max()) for f in (graph, compiled)]
    t = time_in_turns({"eager": eager, "graph": graph, "compiled": compiled}, rounds=5 * s.sizes.repeat,
                          device=s.device, desc="eager, graph, compiled")
    return Replay(s.device.type, float(t["eager"].median), fixed.bandwidth_time, float(t["graph"].median),
                  float(t["compiled"].median), float(reference.abs().max()), *gaps)


@dataclass
class Sampling:
    """Median seconds to turn one step's scores (`vocab` of them) into a token: greedy (argmax), and
    temperature 0.8 with top-50; `plain`: the plain model's step, for scale."""

    vocab: int
    greedy: float
    topk: float
    plain: float

    def numbers(self) -> dict[str, object]:
        return {"smol_vocab": self.vocab, "greedy_us": self.greedy * 1e6, "topk_us": self.topk * 1e6,
                "topk_pct": 100 * self.topk / self.plain, "topk_x": self.topk / self.greedy}

    def table(self):
        import pandas as pd

        df = pd.DataFrame([{"choice": "greedy (argmax)", "time (µs)": self.greedy * 1e6,
                            "of the plain step (%)": 100 * self.greedy / self.plain},
                           {"choice": "temperature + top-50", "time (µs)": self.topk * 1e6,
                            "of the plain step (%)": 100 * self.topk / self.plain}])
        return df.style.format({"time (µs)": "{:,.1f}", "of the plain step (%)": "{:.2f}"}).hide(axis="index")


def time_sampling(s, fixed: FixedCost, repeat: int = 50) -> Sampling:
    """Time `generation.sample` on the logits of one step after `s.sizes.decode_context` tokens: greedy, and
    temperature 0.8 with top_k=50 (median of `repeat` runs after 3 untimed ones each)."""
    logits = forward_fn(s.model, context=s.sizes.decode_context)()  # (1, vocab), in the model's dtype
    rng = torch.Generator(device=s.device).manual_seed(0)
    greedy = time_calls(lambda: sample(logits), warmup=3, repeat=repeat, device=s.device).median
    topk = time_calls(lambda: sample(logits, temperature=0.8, top_k=50, generator=rng), warmup=3, repeat=repeat,
                 device=s.device).median
    return Sampling(int(logits.shape[-1]), float(greedy), float(topk), fixed.plain)


@dataclass
class HalfPrecision:
    """What this processor reports for 2-byte arithmetic (`flags`: {flag: what it does}) and the bytes/s of
    one-row products streaming `nbytes` of weights (`rates`: {dtype: {kernel: bytes/s}}), beside `bandwidth`,
    the probed read bandwidth (bytes/s). `skipped` says why nothing was measured (a run on a GPU, which the
    chapter already measured in its 2-byte dtype, `dtype`)."""

    flags: dict[str, str] = field(default_factory=dict)
    rates: dict[str, dict[str, float]] = field(default_factory=dict)
    nbytes: int = 512 << 20
    skipped: str | None = None
    dtype: str = "float32"  # the chapter's dtype on this device
    bandwidth: float = 0.0  # the probed read bandwidth, bytes/s (0 where nothing was measured)

    @property
    def best_ratio(self) -> float:
        """The faster 2-byte dtype's time per weight ÷ float32's, each with its fastest kernel: 0.5 where half
        the bytes halve the time."""
        f32 = max(self.rates["float32"].values()) / 4  # weights per second
        return min(f32 / (max(self.rates[d].values()) / 2) for d in ("bfloat16", "float16"))

    def numbers(self) -> dict[str, object]:
        size = {"half_mib": self.nbytes / 2**20}  # the prose names it before the measurement, wherever it runs
        if self.skipped:
            return size | {"half_text": self.skipped, "dtype_text": claims.no_half_precision_choice(self.dtype)}
        rates = {(d, k): r for d, kernels in self.rates.items() for k, r in kernels.items()}
        return size | {"half_text": claims.half_precision(self.flags, rates, self.bandwidth, self.nbytes),
                       "dtype_text": claims.half_precision_choice(self.best_ratio)}

    def features(self) -> str:
        """The half-precision features reported, in one line."""
        if not self.flags:
            return "half-precision features reported: none"
        return "half-precision features reported: " + "; ".join(f"{f} ({w})" for f, w in self.flags.items())

    def table(self):
        """Each dtype and kernel's streaming rate, in bytes and in weights per second."""
        import pandas as pd

        if self.skipped:
            return pd.DataFrame({"not measured": [self.skipped]}).style.hide(axis="index")
        df = pd.DataFrame([{"dtype": d, "kernel": k, "GB/s": r / 1e9,
                            "weights/s (G)": r / getattr(torch, d).itemsize / 1e9}
                           for d, kernels in self.rates.items() for k, r in kernels.items()])
        return (df.style.format({"GB/s": "{:.1f}", "weights/s (G)": "{:.2f}"}).hide(axis="index")
                .set_caption(self.features()))


def measure_half_precision(s, bandwidth: float, nbytes: int = 512 << 20, repeat: int = 5) -> HalfPrecision:
    """On a processor: its half-precision flags (`device.cpu_half_precision`) and one-row products streaming
    `nbytes` of weights in float32, bfloat16 and float16 with each kernel (`hardware.ONE_ROW_KERNELS`), to
    set beside `bandwidth`, the probed read bandwidth (bytes/s: `Prediction.bandwidth`).
    On another device, nothing: the chapter's own dtype there is 2-byte and native."""
    if s.device.type != "cpu":
        return HalfPrecision(nbytes=nbytes, skipped=labels.no_half_precision(s.device.type, dtype_name(s.dtype)),
                             dtype=dtype_name(s.dtype))
    rates: dict[str, dict[str, float]] = {}
    for (d, kernel), rate in hardware.measure_one_row_products(nbytes=nbytes, repeat=repeat).items():
        rates.setdefault(d, {})[kernel] = float(rate)
    return HalfPrecision(cpu_half_precision(), rates, nbytes, bandwidth=bandwidth)


def closing_line(replay: Replay, account, compiled=None) -> str:
    """The last cell's line: every check passed, and which were not run here, and why."""
    skipped = [f"check {n} not run: {r.skipped}" for n, r in ((7, replay), (8, account), (10, compiled))
               if r is not None and r.skipped]
    return "All checks passed." + (f" ({'; '.join(skipped)}.)" if skipped else "")

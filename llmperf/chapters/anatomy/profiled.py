"""Chapter 5's step split by kind of op, and its ops counted.

- `profile_step`: torch.profiler's time per kind of op of one decode step of SmolLM2
  (`profiling.op_times`), and the same step timed without the profiler;
- `time_numpy_step`: the fused model's NumPy step timed with a stopwatch by kind
  (`profiling.numpy_step_times`), where there is one (float32 on a processor);
- `count_ops`: the ops (and GPU kernels) a step dispatches in a model of one layer and of
  two, hence per layer and outside the layers, extrapolated to any depth.

Both splits keep the cost model's bytes per kind and the probed bandwidth, so that
each kind's time can be set against its bytes ÷ bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import cost
from ...cost import ATTENTION, KIND_LABELS, LM_HEAD, OP_KINDS, PROJECTIONS
from ...device import dtype_name
from ...profiling import OpTime, StepProfile, forward_fn, numpy_step_times, op_counts, op_times
from ...timing import time_calls
from . import claims, labels
from .predicted import Prediction
from .published import launch_floor

WEIGHT_KINDS = (PROJECTIONS, LM_HEAD)  # the kinds that read weight matrices
SMALL_KINDS = tuple(k for k in OP_KINDS if k not in WEIGHT_KINDS + (ATTENTION,))  # the small ops between them
# Ops that return a view of their input: they change how its memory is read, move no data, launch no kernel.
# (A reshape copies when the strides do not allow a view; in a decode step's (B, 1, H, hd) they always do.)
VIEW_OPS = frozenset({"aten::view", "aten::transpose", "aten::chunk", "aten::split", "aten::select",
                      "aten::slice", "aten::alias", "aten::reshape", "aten::expand", "aten::unsqueeze",
                      "aten::squeeze", "aten::permute", "aten::t", "aten::narrow", "aten::as_strided",
                      "aten::_unsafe_view", "aten::detach"})


@dataclass(frozen=True)
class StepSplit(StepProfile):
    """A decode step's time split by kind of op (`profiling.StepProfile`: `clock`, `kinds`, `step`, a whole
    step's wall time), beside each kind's bytes from the cost model (`kind_bytes`), the probed read bandwidth
    (bytes/s) and the device type."""

    kind_bytes: dict[str, int]
    bandwidth: float
    device: str

    @property
    def outside(self) -> float:
        """Seconds per step outside every op."""
        return self.step - self.in_ops

    @property
    def bandwidth_time(self) -> float:
        """The whole step's bytes ÷ the probed bandwidth, seconds."""
        return sum(self.kind_bytes.values()) / self.bandwidth

    def seconds_of(self, kinds) -> float:
        """Seconds per step of the ops of `kinds`."""
        return sum(self.kinds[k].seconds for k in kinds)

    def rate(self, kind: str) -> float:
        """The bytes/s at which `kind` moved its bytes (0 for a kind with no bytes)."""
        return self.kind_bytes[kind] / self.kinds[kind].seconds if self.kind_bytes[kind] else 0.0

    def _rows(self, count: str) -> list[dict]:
        """One table row per kind: `count` ops, measured and bytes ÷ bandwidth times, GB/s, % of the probe."""
        rows = []
        for k, t in self.kinds.items():
            row = {"kind": KIND_LABELS[k], count: t.ops, "measured (ms)": t.seconds * 1e3,
                   "bytes/BW (ms)": self.kind_bytes[k] / self.bandwidth * 1e3}
            if self.kind_bytes[k]:
                row |= {"GB/s": self.rate(k) / 1e9, "% of probe": 100 * self.rate(k) / self.bandwidth}
            rows.append(row)
        return rows

    @staticmethod
    def _styled(rows: list[dict]):
        import pandas as pd

        formats = {"ops": "{:,.0f}", "kernels": "{:,.0f}", "timed": "{:,.0f}", "measured (ms)": "{:.3f}",
                   "bytes/BW (ms)": "{:.3f}", "GB/s": "{:.1f}", "% of probe": "{:.0f}"}
        df = pd.DataFrame(rows)
        return df.style.format({c: f for c, f in formats.items() if c in df}, na_rep="").hide(axis="index")


@dataclass(frozen=True)
class Profile(StepSplit):
    """torch.profiler's split of a SmolLM2 decode step (`profiling.op_times`; on a CPU each op's time from call
    to return, on a GPU its kernels' run time), and `unprofiled`, the same step's median time without the
    profiler. `n_layers`: the model's layers."""

    unprofiled: float
    n_layers: int

    @property
    def gpu(self) -> bool:
        return self.clock == "gpu"

    @property
    def outside_label(self) -> str:
        return labels.outside_label(self.gpu)

    def numbers(self) -> dict[str, object]:
        k = self.kinds
        per_call = {kind: k[kind].seconds / k[kind].ops for kind in ("norms", "attention")}
        per_call_bytes = {kind: self.kind_bytes[kind] / k[kind].ops / self.bandwidth for kind in per_call}
        head_bytes = self.kind_bytes[LM_HEAD] / sum(self.kind_bytes.values())
        return {
            "n_ops": self.ops, "proj_gbps": self.rate(PROJECTIONS) / 1e9,
            "head_gbps": self.rate(LM_HEAD) / 1e9, "weights_share_pct": 100 * self.seconds_of(WEIGHT_KINDS) / self.step,
            "other_ops": k["other"].ops, "other_ms": k["other"].seconds * 1e3, "outside_ms": self.outside * 1e3,
            "outside_label": self.outside_label, "profiled_ms": self.step * 1e3,
            "unprofiled_ms": self.unprofiled * 1e3,
            "table_note": labels.table_note(self.gpu, per_call["norms"], per_call["attention"],
                                            per_call_bytes["norms"], per_call_bytes["attention"]),
            "clock_text": labels.clock_text(self.gpu), "clock_word": labels.clock_word(self.gpu),
            "outside_text": labels.outside_text(self.gpu),
            "head_text": claims.head_time_share(k[LM_HEAD].seconds / self.in_ops, head_bytes, self.rate(LM_HEAD),
                                                self.rate(PROJECTIONS)),
        }

    def table(self):
        """Per kind: ops, kernels, profiled time, bytes ÷ bandwidth, GB/s and % of the probe; then the time
        outside the ops, the whole step, and the step unprofiled."""
        rows = self._rows("ops")
        for row, t in zip(rows, self.kinds.values()):
            row["kernels"] = t.kernels if self.gpu else None
        rows += [{"kind": self.outside_label, "measured (ms)": self.outside * 1e3},
                 {"kind": "whole step", "ops": self.ops, "kernels": self.kernels if self.gpu else None,
                  "measured (ms)": self.step * 1e3, "bytes/BW (ms)": self.bandwidth_time * 1e3},
                 {"kind": "unprofiled", "measured (ms)": self.unprofiled * 1e3}]
        columns = ["kind", "ops", "kernels", "measured (ms)", "bytes/BW (ms)", "GB/s", "% of probe"]
        return self._styled([{c: r.get(c) for c in columns} for r in rows])

    def check(self) -> None:
        # 2. The profiler sees the products the model runs: seven per layer, plus the LM head, and one attention.
        k = self.kinds
        assert k[PROJECTIONS].ops == 7 * self.n_layers and k[LM_HEAD].ops == 1, k
        assert k["attention"].ops == self.n_layers, k["attention"]


def profile_step(s, prediction: Prediction, steps: int = 5) -> Profile:
    """Profile `steps` decode steps of `s.model` after `s.sizes.decode_context` cached tokens, split by kind;
    and time the same step without the profiler (the median of 2 × `s.sizes.repeat` runs)."""
    ctx = s.sizes.decode_context
    prof = op_times(s.model, context=ctx, steps=steps)
    unprofiled = time_calls(forward_fn(s.model, context=ctx), warmup=2, repeat=2 * s.sizes.repeat,
                            device=s.device).median
    return Profile(prof.clock, _kinds(prof), float(prof.step), _bytes(prediction), prediction.bandwidth,
                   s.device.type, unprofiled=float(unprofiled), n_layers=s.model.cfg.n_layers)


@dataclass(frozen=True)
class NumpyAccount(StepSplit):
    """The fused model's NumPy step split by kind with a stopwatch (`profiling.numpy_step_times`): `ops` per
    kind counts its timed stretches. `skipped` says why nothing was timed (no NumPy step off a float32 CPU);
    then `kinds` is empty."""

    n_layers: int
    skipped: str | None = None

    def numbers(self) -> dict[str, object]:
        if self.skipped:
            return {"account_text": self.skipped, "stretches_per_layer": 0}
        stretches = sum(self.kinds[k].ops for k in SMALL_KINDS)
        return {"stretches_per_layer": stretches / self.n_layers, "account_text": claims.numpy_step_account(
            step=self.step, bandwidth_time=self.bandwidth_time, weights=self.seconds_of(WEIGHT_KINDS),
            weights_bandwidth_time=sum(self.kind_bytes[k] for k in WEIGHT_KINDS) / self.bandwidth,
            attention=self.kinds["attention"].seconds,
            attention_bandwidth_time=self.kind_bytes["attention"] / self.bandwidth,
            small=self.seconds_of(SMALL_KINDS), small_stretches=stretches, between=self.outside)}

    def table(self):
        """Per kind: timed stretches, time, bytes ÷ bandwidth, GB/s, % of the probe; then Python between the
        stretches and the whole step. Where nothing was timed, the reason."""
        if self.skipped:
            import pandas as pd

            return pd.DataFrame({"not measured": [self.skipped]}).style.hide(axis="index")
        rows = self._rows("timed") + [{"kind": "Python", "measured (ms)": self.outside * 1e3},
                                      {"kind": "whole step", "measured (ms)": self.step * 1e3,
                                       "bytes/BW (ms)": self.bandwidth_time * 1e3}]
        return self._styled(rows)

    def check(self) -> None:
        # 8. The fused NumPy step (float32 on a processor) runs four products per layer and the LM head, and
        #    they, not the small ops between them, take most of its time.
        if self.skipped:
            return
        lines = {k: t.ops for k, t in self.kinds.items()}
        assert lines[PROJECTIONS] == 4 * self.n_layers and lines[LM_HEAD] == 1, lines
        assert lines["attention"] == lines["kv_write"] == self.n_layers, lines
        assert lines["norms"] == 2 * self.n_layers + 1, lines
        weights = self.seconds_of(WEIGHT_KINDS)
        assert weights > 0.5 * self.step, (weights, self.step)


def time_numpy_step(s, fused, prediction: Prediction) -> NumpyAccount:
    """Time 3 × `s.sizes.repeat` NumPy decode steps of `fused` (`llmperf.fast.fuse(s.model)`) after
    `s.sizes.decode_context` cached tokens, by kind of op; or say why there is no NumPy step to time."""
    common = {"clock": "cpu", "device": s.device.type, "kind_bytes": _bytes(prediction), "bandwidth": prediction.bandwidth,
              "n_layers": s.model.cfg.n_layers}
    if fused.numpy_step is None:
        return NumpyAccount(kinds={}, step=0.0, skipped=labels.no_numpy_step(dtype_name(s.dtype), s.device.type),
                            **common)
    account = numpy_step_times(fused, context=s.sizes.decode_context, steps=3 * s.sizes.repeat)
    return NumpyAccount(kinds=_kinds(account), step=float(account.step), **common)


@dataclass
class OpCounts:
    """Ops (and GPU kernels, 0 on other devices) one decode step dispatches in a model of one layer and of two
    (`by_depth`: {"1": ..., "2": ...}), with the weight products (aten::linear) and the views (`VIEW_OPS`, which
    launch nothing) among them; hence per layer and outside the layers, extrapolated to SmolLM2's `n_layers`
    (against `profiled_ops`) and to Llama-3-8B's."""

    device: str
    context: int
    by_depth: dict[str, dict[str, int]] = field(default_factory=dict)  # depth -> {"ops", "kernels", "linears", "views"}
    n_layers: int = 0
    llama_layers: int = 32
    profiled_ops: float = 0.0
    llama_h100_time: float = 0.0  # Llama-3-8B's bytes at an H100's bandwidth, seconds
    batch: int = 8
    batched_ops: int = 0  # the one-layer model's ops at `batch` sequences (by_depth["1"] is at batch 1)

    def per_layer(self, what: str = "ops") -> int:
        """`what` ("ops", "kernels" or "views") per layer: the two-layer model's count minus the one-layer model's."""
        return self.by_depth["2"].get(what, 0) - self.by_depth["1"].get(what, 0)

    def fixed(self, what: str = "ops") -> int:
        """`what` outside the layers: the one-layer model's count minus one layer's."""
        return self.by_depth["1"].get(what, 0) - self.per_layer(what)

    def at_depth(self, layers: int, what: str = "ops") -> int:
        """`what` for a model of `layers` layers of the same code."""
        return self.fixed(what) + layers * self.per_layer(what)

    def working(self, layers: int) -> int:
        """The ops that are not views, for a model of `layers` layers: on a GPU each launches a kernel or more."""
        return self.at_depth(layers) - self.at_depth(layers, "views")

    def launches(self, layers: int) -> int:
        """Kernel launches of a step of `layers` layers: the kernels counted, on a GPU; elsewhere the ops that
        are not views, a lower bound on what a GPU would launch."""
        return self.at_depth(layers, "kernels") if self.gpu else self.working(layers)

    @property
    def gpu(self) -> bool:
        return self.device == "cuda"

    def numbers(self) -> dict[str, object]:
        return {"ops_per_layer": self.per_layer(), "ops_fixed": self.fixed(),
                "ops_l8": self.at_depth(self.llama_layers), "views_per_layer": self.per_layer("views"),
                "work_per_layer": self.per_layer() - self.per_layer("views"),
                "work_l8": self.working(self.llama_layers),
                "l8_launch_text": launch_floor(self.launches(self.llama_layers), self.llama_h100_time),
                "kernels_text": labels.kernels_text(self.gpu, self.per_layer("kernels"), self.fixed("kernels"),
                                                    self.at_depth(self.llama_layers, "kernels"))}

    def table(self):
        """The counts measured (one and two layers, and the profiled step), the two derived (per layer,
        outside the layers) and the two extrapolated (SmolLM2's depth, Llama-3-8B's)."""
        import pandas as pd

        def row(model: str, layers: int) -> dict:
            return {"model": model, **{w: self.at_depth(layers, w) for w in ("ops", "views", "kernels")}}

        rows = [{"model": "1 layer", **self.by_depth["1"]}, {"model": "2 layers", **self.by_depth["2"]},
                {"model": "per layer", **{w: self.per_layer(w) for w in ("ops", "views", "kernels")}},
                {"model": "outside the layers", **{w: self.fixed(w) for w in ("ops", "views", "kernels")}},
                row(f"SmolLM2 ({self.n_layers} layers), extrapolated", self.n_layers),
                {"model": f"SmolLM2 ({self.n_layers} layers), profiled", "ops": self.profiled_ops},
                row(f"Llama-3-8B ({self.llama_layers} layers), extrapolated", self.llama_layers)]
        columns = ["model", "ops", "views", "kernels", "linears"]
        df = pd.DataFrame([{c: r.get(c) for c in columns} for r in rows])
        df = df.rename(columns={"linears": "weight products (aten::linear)", "views": "views (launch nothing)"})
        if not self.gpu:
            df = df.drop(columns="kernels")  # a processor launches none
        return df.style.format("{:,.0f}", subset=[c for c in df if c != "model"], na_rep="").hide(axis="index")

    def check(self) -> None:
        # 2. The weight products: seven per layer, plus the LM head, in a one- and a two-layer model.
        linears = self.by_depth["1"]["linears"], self.by_depth["2"]["linears"]
        assert linears == (7 + 1, 2 * 7 + 1), linears
        # 3. The op count grows by the same number per layer: the count for the model's depth is the profiled one.
        assert self.at_depth(self.n_layers) == self.profiled_ops, (self.at_depth(self.n_layers), self.profiled_ops)


def count_ops(s, profile: Profile, prediction: Prediction, batch: int = 8) -> OpCounts:
    """Count the ops of one decode step (after `s.sizes.decode_context` tokens) of `s.model`'s architecture
    with one layer and with two (random weights, `s.device`, `s.dtype`), and of the one-layer model's step at
    `batch` sequences."""
    from ...weights import build_model

    cfg, ctx = s.model.cfg, s.sizes.decode_context
    by_depth = {}
    for layers in (1, 2):
        model = build_model(cfg.with_(n_layers=layers), s.device, s.dtype)
        c = op_counts(model, context=ctx)
        by_depth[str(layers)] = {"ops": int(sum(c["ops"].values())), "kernels": int(sum(c["kernels"].values())),
                                 "linears": int(c["ops"]["aten::linear"]),
                                 "views": int(sum(n for name, n in c["ops"].items() if name in VIEW_OPS))}
        if layers == 1:  # the same step carrying `batch` sequences: the exercise's measurement
            batched = int(sum(op_counts(model, batch=batch, context=ctx)["ops"].values()))
    return OpCounts(s.device.type, ctx, by_depth, cfg.n_layers, cost.get_config("llama-3-8b").n_layers,
                    float(profile.ops), prediction.llama_h100_time, batch, batched)


def _kinds(prof) -> dict[str, OpTime]:
    """A profiling.StepProfile's kinds, in plain floats."""
    return {k: OpTime(k, float(t.ops), float(t.kernels), float(t.seconds)) for k, t in prof.kinds.items()}


def _bytes(prediction: Prediction) -> dict[str, int]:
    """The chapter's SmolLM2 step's bytes per kind."""
    return {k: op.bytes for k, op in prediction.smol.kinds.items()}

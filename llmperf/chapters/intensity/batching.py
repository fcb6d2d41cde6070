"""Chapter 3's batch sweep: SmolLM2's decode step at each batch size of the device's sweep, counted by `cost`
(FLOPs, bytes, intensity, the KV cache's share) and timed; and the gap to the roof at batch 1, the plain model
timed beside `fast.fuse(model)`.

Every step has `sizes.decode_context` cached tokens per sequence and attends to one more position, the new
token's. Times are medians of steps timed in turns (`timing.time_in_turns`), so that a burst of other work
on the machine hits every point alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ... import cost, hardware
from ...book import Collapsed
from ...fast import fuse, kernel
from ...hardware import Accelerator
from ...profiling import forward_fn, op_counts
from ...timing import time_in_turns
from ... import wording
from ..anatomy.published import GRAPH_ASYNC_S, GRAPH_KERNEL_S, GRAPH_REPLAYED_S, GRAPH_SYNCED_S
from . import claims
from .counts import gptfast_pct, middle_batch


def kv_equals_weights_at(cfg, context: int, bytes_per_param: int) -> float:
    """The batch whose KV cache (read and written) moves as many bytes as the weights, at `context` positions."""
    parts = cost.decode_parts(cfg, context, 1, bytes_per_param)
    return parts["weights"].bytes / parts["attention"].bytes


@dataclass
class BatchCounts:
    """The cost model's decode step at each batch of the sweep: Llama-3-8B (2-byte weights) and SmolLM2 in the
    chapter's dtype, both attending to context + 1 positions, and where SmolLM2's two parts meet this machine's
    ridge (`cost.decode_parts`: the weight products, whose intensity grows with the batch, and attention,
    whose intensity does not)."""

    context: int  # cached tokens per sequence
    bytes_per_param: int
    batches: list[int]
    llama_intensity: list[float]  # FLOP/byte, one per batch
    smol_intensity: list[float]
    smol_bytes: list[int]  # bytes per step
    smol_kv_bytes: list[int]  # of which KV cache
    here_ridge: float  # this machine's ridge in the chapter's dtype
    weights_cross: int  # the batch at which SmolLM2's weight products reach that ridge
    attention_intensity: float  # SmolLM2's attention, FLOP per byte of cache, at any batch

    def numbers(self) -> dict[str, object]:
        return {
            "ctx": self.context, "smol_int_1": self.smol_intensity[0],
            "weights_bound_text": claims.weights_bound(self.weights_cross, self.batches[-1], self.here_ridge),
            "attention_bound_text": claims.attention_bound(self.attention_intensity, self.here_ridge),
        }

    def table(self):
        df = pd.DataFrame({
            "batch": self.batches, "Llama-3-8B (FLOP/byte)": self.llama_intensity,
            "SmolLM2 (FLOP/byte)": self.smol_intensity, "SmolLM2 step (GB)": [b / 1e9 for b in self.smol_bytes],
            "KV share (%)": [100 * k / b for k, b in zip(self.smol_kv_bytes, self.smol_bytes)],
        })
        fmt = {"Llama-3-8B (FLOP/byte)": "{:.1f}", "SmolLM2 (FLOP/byte)": "{:.2f}", "SmolLM2 step (GB)": "{:.3f}",
               "KV share (%)": "{:.1f}"}
        return df.style.format(fmt).hide(axis="index")

    def check(self) -> None:
        """SmolLM2's step at batch 1 is bandwidth-bound on this machine, in the dtype it measured."""
        assert self.smol_intensity[0] < self.here_ridge, (self.smol_intensity[0], self.here_ridge)


def batch_counts(s, here: Accelerator) -> BatchCounts:
    """Count the sweep's steps (s: the chapter's setup; here: this machine's probe, for its ridge).

    The sweep's batches start at 1 (`Sizes.decode_batches`)."""
    cfg, bpp, ctx, batches = s.model.cfg, s.dtype.itemsize, s.sizes.decode_context, list(s.sizes.decode_batches)
    llama = cost.get_config("llama-3-8b")
    smol = [cost.decode_bytes(cfg, ctx + 1, b, bpp) for b in batches]
    return BatchCounts(
        context=ctx, bytes_per_param=bpp, batches=batches,
        llama_intensity=[cost.decode_intensity(llama, ctx + 1, b) for b in batches],
        smol_intensity=[cost.decode_intensity(cfg, ctx + 1, b, bpp) for b in batches],
        smol_bytes=[b.total for b in smol], smol_kv_bytes=[b.kv for b in smol], here_ridge=here.ridge,
        weights_cross=cost.compute_bound_batch(cfg, here.ridge, ctx + 1, bpp, part="weights"),
        attention_intensity=cost.decode_parts(cfg, ctx + 1, 1, bpp)["attention"].intensity)


@dataclass
class BatchSweep:
    """SmolLM2's decode step at each batch size: measured median time, the cost model's bytes and FLOPs, and two
    predictions on this machine's probed roof (bytes ÷ read bandwidth, and the roofline part by part)."""

    device_type: str
    context: int
    batches: list[int]  # starting at 1
    step_s: list[float]  # measured median seconds per step
    nbytes: list[int]  # cost.decode_bytes per step
    nflops: list[int]  # cost.decode_flops per step
    bandwidth: float  # this machine's probed read bandwidth (bytes/s)
    roof_s: list[float]  # hardware.roofline_time_in_parts on this machine
    kv_equals_weights_at: float  # the batch whose KV cache moves as many bytes as the weights
    floor_s: list[float] | None = None  # the roofline on the faster probe (`hardware.faster_probe`); None: roof_s

    @property
    def tokens_per_s(self) -> list[float]:
        return [b / t for b, t in zip(self.batches, self.step_s)]

    @property
    def bandwidth_s(self) -> list[float]:
        """The bandwidth-bound prediction: each step's bytes ÷ the probed read bandwidth."""
        return [b / self.bandwidth for b in self.nbytes]

    @property
    def intensity(self) -> list[float]:
        return [f / b for f, b in zip(self.nflops, self.nbytes)]

    @property
    def mid(self) -> int:
        """Index of the batch in the middle of the sweep."""
        return self.batches.index(middle_batch(self.batches))

    def numbers(self) -> dict[str, object]:
        step, tps, roof, i = self.step_s, self.tokens_per_s, self.roof_s, self.mid
        b_max, growth = self.batches[-1], step[-1] / step[0]
        bytes_growth = self.nbytes[-1] / self.nbytes[0]
        bw1 = self.nbytes[0] / step[0]  # bytes per second at batch 1
        return {
            "B_max": b_max, "B_mid": self.batches[i], "step1_ms": step[0] * 1e3, "stepmax_ms": step[-1] * 1e3,
            "tps1": tps[0], "tps_mid": tps[i], "tpsmax": tps[-1],
            "tps_gain_mid": tps[i] / tps[0], "tps_gainmax": tps[-1] / tps[0],
            "tbwmax_ms": self.bandwidth_s[-1] * 1e3, "troofmax_ms": roof[-1] * 1e3,
            "gap1": step[0] / roof[0], "gapmax": step[-1] / roof[-1],
            "per_user_text": claims.per_user_speed(growth, b_max), "trade_text": claims.batch_trade(growth),
            "per_user_mid_text": claims.per_user_speed(step[i] / step[0], self.batches[i]),
            "fixed_cost_text": claims.batch_fixed_cost(step[0] / roof[0], step[-1] / roof[-1]),
            "prediction_text": claims.batch_against_prediction(self.batches[i], step[i] / step[0], roof[i] / roof[0]),
            "probe_gap_text": claims.probe_gap(100 * bw1 / self.bandwidth, bw1 / 1e9, self.bandwidth / 1e9),
            "bytes_text": claims.bytes_growth(bytes_growth, b_max, self.kv_equals_weights_at),
            "roof_text": claims.against_roof(min(t / r for t, r in zip(step, roof))),
            "gap_trend": wording.trend(step[0] / roof[0], step[-1] / roof[-1], "at batch 1", f"at batch {b_max}"),
            "small_batch_text": claims.small_batch_kernel(
                self.device_type, self.batches[1], step[1] / step[0], roof[1] / roof[0],
                (self.nbytes[0] / step[0] / 1e9, self.nbytes[1] / step[1] / 1e9), self.bandwidth / 1e9),
        }

    def table(self):
        achieved = [b / t for b, t in zip(self.nbytes, self.step_s)]  # bytes per second
        df = pd.DataFrame({
            "batch": self.batches, "FLOP/byte": self.intensity,
            "bytes/BW (ms)": [t * 1e3 for t in self.bandwidth_s], "roofline (ms)": [t * 1e3 for t in self.roof_s],
            "measured (ms)": [t * 1e3 for t in self.step_s], "tokens/s": self.tokens_per_s,
            "GB/s": [a / 1e9 for a in achieved], "% of BW": [100 * a / self.bandwidth for a in achieved],
        })
        fmt = {"FLOP/byte": "{:.2f}", "bytes/BW (ms)": "{:.2f}", "roofline (ms)": "{:.2f}", "measured (ms)": "{:.2f}",
               "tokens/s": "{:,.1f}", "GB/s": "{:.2f}", "% of BW": "{:.1f}"}
        return Collapsed(df.style.format(fmt).hide(axis="index"), "sweep")

    def check(self) -> None:
        """Tokens/s grow with the batch (a quarter of the batch, at least, at the middle one), and no step beats
        its roofline on the faster probe (`floor_s`) by more than the probe's own error (10 %)."""
        tps, i, b_mid = self.tokens_per_s, self.mid, self.batches[self.mid]
        assert tps[i] >= b_mid / 4 * tps[0], f"batch {b_mid} gave only {tps[i] / tps[0]:.1f}x the tokens/s of batch 1"
        ratios = [t / r for t, r in zip(self.step_s, self.floor_s or self.roof_s)]
        assert min(ratios) >= 0.9, f"batch sweep beat the roofline: {[round(x, 3) for x in ratios]}"


def batch_sweep(s, here: Accelerator, rounds: int | None = None) -> BatchSweep:
    """Time one decode step of `s.model` at each batch of `s.sizes.decode_batches`, in turns for `rounds` rounds
    (default 3 · sizes.repeat), and predict each on `here` (this machine's probe); `check` holds each to the
    roofline on the faster of `here` and a probe taken right after the steps (`hardware.faster_probe`)."""
    cfg, bpp, ctx, batches = s.model.cfg, s.dtype.itemsize, s.sizes.decode_context, list(s.sizes.decode_batches)
    timings = time_in_turns({b: forward_fn(s.model, batch=b, context=ctx) for b in batches},
                                rounds=rounds or 3 * s.sizes.repeat, device=s.device, desc="decode step, batch sweep")
    faster = hardware.faster_probe(here, s.device)
    parts = [cost.decode_parts(cfg, ctx + 1, b, bpp) for b in batches]
    return BatchSweep(
        device_type=s.device.type, context=ctx, batches=batches, step_s=[timings[b].median for b in batches],
        nbytes=[cost.decode_bytes(cfg, ctx + 1, b, bpp).total for b in batches],
        nflops=[cost.decode_flops(cfg, ctx + 1, b).total for b in batches], bandwidth=here.bandwidth,
        roof_s=[hardware.roofline_time_in_parts(p, here) for p in parts],
        kv_equals_weights_at=kv_equals_weights_at(cfg, ctx + 1, bpp),
        floor_s=[hardware.roofline_time_in_parts(p, faster) for p in parts])


CUDA_GRAPHS_POST = {"kernel": GRAPH_KERNEL_S, "synced": GRAPH_SYNCED_S, "async": GRAPH_ASYNC_S,
                    "graph": GRAPH_REPLAYED_S}
"""NVIDIA's CUDA Graphs post (gray2019cudagraphs), as chapter 5 records it (`anatomy.published`), seconds per
kernel for a kernel that runs 2.9 µs: launched with
a sync after each ("synced"), launched asynchronously one after another ("async"), and replayed in a graph
("graph"). Most of synced − kernel is the sync; a launch's own overhead is async − kernel, and a graph's
graph − kernel."""


def launch_overhead(way: str) -> float:
    """Seconds a kernel launched `way` ("synced", "async", "graph") adds to its own run time, by the post."""
    return CUDA_GRAPHS_POST[way] - CUDA_GRAPHS_POST["kernel"]


@dataclass
class Gap:
    """The plain model against `fast.fuse(model)` at batch 1 on a device of `device_type` (median step times, the
    same bytes and FLOPs), the ops one plain step dispatches (`profiling.op_counts`), SmolLM2's 2-byte weights
    streamed on an H100 against NVIDIA's measured launch costs (`CUDA_GRAPHS_POST`), and Kipply's published
    measured ÷ predicted time."""

    device_type: str
    plain_s: float
    fused_s: float
    step_bytes: int  # the step's bytes in the chapter's dtype
    bandwidth: float  # this machine's probed read bandwidth (bytes/s)
    n_ops: int
    weight_bytes_2_bytes: int  # SmolLM2's weights (the step reads them once) in a 2-byte format
    h100_bandwidth: float
    kipply_ratio: float
    products: str = "none"  # where the fused step's products ran: "compiled", "BLAS", or "none" (no NumPy step)
    why_not_compiled: str | None = None  # why the compiled loop could not run here, if it could not

    def pct_of_bandwidth(self, seconds: float) -> float:
        return 100 * self.step_bytes / seconds / self.bandwidth

    def numbers(self) -> dict[str, object]:
        plain_pct, fused_pct, gf_pct = (self.pct_of_bandwidth(self.plain_s), self.pct_of_bandwidth(self.fused_s),
                                        gptfast_pct())
        post, launch_s, graph_s = CUDA_GRAPHS_POST, launch_overhead("async"), launch_overhead("graph")
        stream_s = self.weight_bytes_2_bytes / self.h100_bandwidth
        return {
            "fused_text": claims.fused_result(self.plain_s, self.fused_s, plain_pct, fused_pct),
            "fused_products_text": claims.fused_products(self.products, self.why_not_compiled),
            "rows_per_block": kernel.ROWS_PER_BLOCK,
            "tuned_text": claims.tuned_code(plain_pct, fused_pct, gf_pct),
            "gptfast_text": claims.gptfast_beside(gf_pct, plain_pct, self.device_type),
            "n_ops": self.n_ops, "smol_bf16_mb": self.weight_bytes_2_bytes / 1e6, "smol_h100_us": stream_s * 1e6,
            "gray_kernel_us": post["kernel"] * 1e6, "gray_synced_us": post["synced"] * 1e6,
            "gray_async_us": post["async"] * 1e6, "gray_graph_us": post["graph"] * 1e6,
            "gray_overhead_us": launch_s * 1e6, "gray_graph_overhead_us": graph_s * 1e6,
            "smol_h100_launches": stream_s / launch_s, "smol_h100_graph_launches": stream_s / graph_s,
            "kipply_ratio": self.kipply_ratio, "launch_text": claims.launches_vs_bytes(self.n_ops, stream_s / launch_s),
        }

    def table(self):
        times = {"plain model": self.plain_s, "fuse(model)": self.fused_s}
        df = pd.DataFrame({
            "batch 1": list(times), "step (ms)": [t * 1e3 for t in times.values()],
            "GB/s": [self.step_bytes / t / 1e9 for t in times.values()],
            "% of probed BW": [self.pct_of_bandwidth(t) for t in times.values()],
        })
        return df.style.format({"step (ms)": "{:.2f}", "GB/s": "{:.2f}", "% of probed BW": "{:.1f}"}).hide(axis="index")


def gap_to_roof(s, here: Accelerator, rounds: int | None = None) -> Gap:
    """Time the plain model and `fuse(s.model)` at batch 1, in turns for `rounds` rounds (default 2 · repeat), three
    untimed steps before each timed one (BLAS's threads keep spinning for a moment after a fused step); count
    the ops of one plain step."""
    cfg, bpp, ctx = s.model.cfg, s.dtype.itemsize, s.sizes.decode_context
    fast_model = fuse(s.model)
    step = fast_model.numpy_step
    products = "none" if step is None else "compiled" if step.compiled else "BLAS"
    pair = time_in_turns({"plain": forward_fn(s.model, context=ctx), "fused": forward_fn(fast_model, context=ctx)},
                             rounds=rounds or 2 * s.sizes.repeat, settle=3, device=s.device)
    del fast_model
    kipply = hardware.PUBLISHED["kipply"]  # a 13B model on one A100 at batch 1: predicted, then measured
    return Gap(device_type=s.device.type, plain_s=pair["plain"].median, fused_s=pair["fused"].median,
               step_bytes=cost.decode_bytes(cfg, ctx + 1, 1, bpp).total, bandwidth=here.bandwidth,
               n_ops=sum(op_counts(s.model, context=ctx)["ops"].values()),
               weight_bytes_2_bytes=cost.decode_bytes(cfg, ctx + 1, 1, 2).weights,
               h100_bandwidth=hardware.ACCELERATORS["H100 SXM"].bandwidth,
               kipply_ratio=kipply.ms_per_token / kipply.predicted_ms, products=products,
               why_not_compiled=kernel.why_not() if products == "BLAS" else None)


def explore_view(sweep: BatchSweep, here, bytes_per_param: int):
    """The roofline of any accelerator with any model's decode step on it (`llmperf.explore`), with this
    machine's measured steps as markers: SmolLM2 on this machine's probe (`here`) to start."""
    from ...explore import page

    name = "this machine, probed"
    dtype = {4: "float32", 2: "bfloat16", 1: "fp8"}[bytes_per_param]
    achieved = [f / t for f, t in zip(sweep.nflops, sweep.step_s)]
    return page.embed("roofline", extra=[page.accelerator_row(here, name)],
                      inputs={"model": "smollm2-135m", "accelerator": name, "weight_dtype": dtype,
                              "kv_dtype": dtype, "batch": 1, "context": sweep.context + 1},
                      measured=[{"label": "SmolLM2 steps, measured here", "x": sweep.intensity, "y": achieved}])

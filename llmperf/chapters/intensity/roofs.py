"""Chapter 3's roofline of this machine (measured by `hardware.probe`) beside the table's H100 and H200, and the
shortest Llama-3-8B decode step each allows (bytes ÷ bandwidth, or FLOPs ÷ peak where that is longer)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd
import torch

from ... import hardware
from ...device import dtype_name
from ...hardware import Accelerator
from . import claims
from .counts import LlamaCounts

DTYPE_2_BYTES = "bfloat16"  # the 2-byte format this machine's peak is measured in, for Llama-3-8B's rows

PROBE_MARGIN = 1.5  # the least ratio allowed between two bandwidth probes run at different moments


def probe_margin(times) -> float:
    """The ratio within which a bandwidth probe timed `times` (seconds per run) must agree with the package's
    probe (`hardware.measure_bandwidth`): the spread of its own runs, slowest ÷ fastest, and at least
    PROBE_MARGIN, since other work on a shared machine can slow every run of one probe and none of the other's."""
    return max(PROBE_MARGIN, max(times) / min(times))


def probe_agreement(probe, device, rounds: int = 3, nbytes: int = 256 << 20) -> tuple[float, float]:
    """The page's own read probe against the package's (`hardware.measure_bandwidth`), run in turns for
    `rounds` rounds so that both see the same load: (the ratio of their best rates, the margin it must lie
    within). `probe(nbytes)` returns (bytes/s, each run's seconds). The margin is `probe_margin` of the
    page's runs, or the spread of the package's rounds where that is wider."""
    mine, times, theirs = [], [], []
    for _ in range(rounds):
        rate, runs = probe(nbytes)
        mine.append(rate)
        times += runs
        theirs.append(hardware.measure_bandwidth(device, nbytes=nbytes, repeat=5)["read"])
    return max(mine) / max(theirs), max(probe_margin(times), max(theirs) / min(theirs))


def probed_label(device_type: str, dtype: str, threads: int) -> str:
    """How a table or figure names this machine's probed roof: "this machine, probed, float32, 1 PyTorch thread".
    On a CPU the probe's rates, and so the ridge, depend on PyTorch's thread count (which each chapter's `setup`
    chooses at start-up), so the label carries it; an accelerator's roof does not depend on it."""
    if device_type != "cpu":
        return f"this machine, probed, {dtype}"
    return f"this machine, probed, {dtype}, {threads} PyTorch thread" + ("" if threads == 1 else "s")


@dataclass
class Roofs:
    """This machine as `hardware.probe` measured it (peak in the chapter's dtype, read bandwidth, and every
    figure in `measured`), the table's H100 SXM and H200 SXM, every table accelerator's ridge, and the
    Llama-3-8B step (batch 1, 2-byte weights) that the table puts on them."""

    here: Accelerator
    dtype: str  # the dtype `here` was probed in (its peak, `flops`)
    h100: Accelerator
    h200: Accelerator
    table_ridges: dict[str, float]  # every hardware.ACCELERATORS row's ridge (FLOP/byte), by name
    step_flops: int  # Llama-3-8B's step, exact count
    step_bytes: int
    intensity_2n: float  # the 2·N rule of thumb's intensity, which the table compares with each ridge
    intensity_exact: float
    device_type: str = "cpu"
    threads: int = 1  # PyTorch's thread count when `here` was probed

    @property
    def label(self) -> str:
        """This machine's roof as a figure or table names it (`probed_label`): dtype and, on a CPU, threads."""
        return probed_label(self.device_type, self.dtype, self.threads)

    @property
    def here_2_bytes(self) -> Accelerator:
        """This machine with its bfloat16 matmul rate as the peak: its roof for a 2-byte model."""
        return dataclasses.replace(self.here, flops=self.here.measured[f"matmul_{DTYPE_2_BYTES}"])

    @property
    def h100_x2(self) -> Accelerator:
        """A hypothetical H100 SXM with twice the FLOP/s and the same memory."""
        return dataclasses.replace(self.h100, name="H100 SXM with twice the FLOP/s", flops=2 * self.h100.flops)

    def floor(self, hw: Accelerator) -> float:
        """Least seconds for the Llama-3-8B step on `hw` (`hardware.roofline_time`)."""
        return hardware.roofline_time(self.step_flops, self.step_bytes, hw)

    def share_pct(self, hw: Accelerator) -> float:
        """The step's 2·N intensity (the rule of thumb's) as a percentage of `hw`'s ridge: the arithmetic it uses."""
        return 100 * self.intensity_2n / hw.ridge

    def numbers(self) -> dict[str, object]:
        h100, h200, here, here2 = self.h100, self.h200, self.here, self.here_2_bytes
        return {
            "h100_ridge": h100.ridge, "h100_pct": self.share_pct(h100),
            "h100_pct_exact": 100 * self.intensity_exact / h100.ridge, "h100_floor_ms": self.floor(h100) * 1e3,
            "h100_tbs": h100.bandwidth / 1e12,
            "h200_ridge": h200.ridge, "h200_pct": self.share_pct(h200), "h200_floor_ms": self.floor(h200) * 1e3,
            "h200_tbs": h200.bandwidth / 1e12,
            "here_bw_gbs": here.bandwidth / 1e9, "here_ridge": here.ridge, "here_bf16_ridge": here2.ridge,
            "here_floor_ms": self.floor(here2) * 1e3,
            "here_bf16_text": claims.low_precision_ridge(DTYPE_2_BYTES, here2.ridge, self.intensity_exact,
                                                         here2.flops / 1e9),
            "h100_x2_floor_ms": self.floor(self.h100_x2) * 1e3,
            "h200_bw_ratio": h200.bandwidth / h100.bandwidth, "h200_speedup": self.floor(h100) / self.floor(h200),
            "table_min_ridge": min(self.table_ridges.values()), "here_threads": self.threads, "here_label": self.label,
            "threads_text": claims.threads_note(self.device_type, self.threads),
        }

    def probe_table(self):
        """What the probe measured on this machine."""
        m, name = self.here.measured, self.here.name
        df = pd.DataFrame({
            "measurement": ["read bandwidth (GB/s)", "copy bandwidth (GB/s)", "matmul float32 (GFLOP/s)",
                            f"matmul {DTYPE_2_BYTES} (GFLOP/s)", "PyTorch threads"],
            name: [m["read_bandwidth"] / 1e9, m["copy_bandwidth"] / 1e9, m["matmul_float32"] / 1e9,
                   m[f"matmul_{DTYPE_2_BYTES}"] / 1e9, self.threads],
        })
        return (df.style.format("{:,.1f}", subset=pd.IndexSlice[:3, name])
                .format("{:,.0f}", subset=pd.IndexSlice[4:, name]).hide(axis="index"))

    def table(self):
        """The Llama-3-8B step on the H100, the H200 and this machine (2-byte peak): ridge, share, floor."""
        names = {self.h100.name: self.h100.name, self.h200.name: self.h200.name,
                 self.here.name: probed_label(self.device_type, DTYPE_2_BYTES, self.threads)}
        rows = [{"device": names[hw.name], "TFLOP/s": hw.flops / 1e12, "TB/s": hw.bandwidth / 1e12,
                 "ridge (FLOP/byte)": hw.ridge, "I / ridge (%)": self.share_pct(hw),
                 "floor (ms)": self.floor(hw) * 1e3, "tokens/s": 1 / self.floor(hw)}
                for hw in (self.h100, self.h200, self.here_2_bytes)]
        fmt = {"TFLOP/s": "{:.3g}", "TB/s": "{:.3g}", "ridge (FLOP/byte)": "{:.1f}", "I / ridge (%)": "{:.2f}",
               "floor (ms)": "{:,.2f}", "tokens/s": "{:,.1f}"}
        return pd.DataFrame(rows).style.format(fmt).hide(axis="index")

    def check(self) -> None:
        """Bandwidth-bound at batch 1 on every device in the table."""
        above = {name: r for name, r in self.table_ridges.items() if not self.intensity_exact < r}
        assert not above, f"Llama-3-8B's step ({self.intensity_exact:.2f} FLOP/byte) reaches the ridge of {above}"


def roofline(s, counts: LlamaCounts) -> Roofs:
    """Probe this machine in the chapter's dtype (`hardware.probe`) and set it beside the table's H100 and H200
    for the Llama-3-8B step of `counts` (s: the chapter's setup)."""
    table = hardware.ACCELERATORS
    return Roofs(here=hardware.probe(s.device, s.dtype), dtype=dtype_name(s.dtype), h100=table["H100 SXM"],
                 h200=table["H200 SXM"], table_ridges={name: hw.ridge for name, hw in table.items()},
                 step_flops=counts.flops_exact, step_bytes=counts.step_bytes, intensity_2n=counts.intensity_2n,
                 intensity_exact=counts.intensity_exact, device_type=s.device.type, threads=torch.get_num_threads())


def setup_numbers(s) -> dict[str, object]:
    """The setup the chapter's prose names: device type, dtype and its bytes per weight (s: the chapter's setup)."""
    return {"device": s.device.type, "dtype_name": dtype_name(s.dtype), "bpp": s.dtype.itemsize}

"""The accelerator table and the roofline's arithmetic: what a device can do, by its datasheet.

Pure Python (no torch), so the cost model's predictions run anywhere, a browser
included (`llmperf.explore`). A device has two limits: how fast it multiplies
(peak FLOP/s) and how fast it moves bytes between memory and the compute units
(bandwidth, bytes/s). Work with arithmetic intensity I (FLOPs per byte moved)
takes at least

    max(FLOPs / peak, bytes / bandwidth)

seconds: the roofline. Below the ridge point peak / bandwidth a kernel waits on
memory, above it on arithmetic.

`ACCELERATORS` holds vendors' datasheet figures (dense bf16/fp16 tensor-core
peaks, no sparsity), see shared/reference/facts.md; `llmperf.hardware.probe()`
measures the device you are on and returns the same type. `PUBLISHED` holds
published batch-1 decode measurements to set beside a prediction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .cost import OpCost

TB, GB, MiB = 1e12, 1e9, 2**20


@dataclass(frozen=True)
class Accelerator:
    """One device's roofline: peak matmul FLOP/s, memory bandwidth (bytes/s), memory size (bytes).

    `memory` is what the device reports where that is known (an H100 80 GB shows
    81,559 MiB in nvidia-smi, not 80·10⁹ bytes), else the datasheet's figure.
    """

    name: str
    flops: float
    bandwidth: float
    memory: float
    source: str
    measured: dict = field(default_factory=dict, compare=False)  # probe(): every measurement, by name

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which the compute roof meets the bandwidth roof."""
        return ridge_point(self)


_DATASHEET = "vendor datasheet (dense bf16/fp16 tensor peak, no sparsity)"
ACCELERATORS: dict[str, Accelerator] = {
    a.name: a
    for a in [
        Accelerator("H100 SXM", 989 * TB, 3.35 * TB, 81_559 * MiB, _DATASHEET + "; memory as nvidia-smi reports it"),
        Accelerator("H100 PCIe", 756 * TB, 2.0 * TB, 81_559 * MiB, _DATASHEET + "; memory as nvidia-smi reports it"),
        Accelerator("H200 SXM", 989 * TB, 4.8 * TB, 143_771 * MiB, _DATASHEET + "; memory as nvidia-smi reports it"),
        Accelerator("A100 SXM 80GB", 312 * TB, 2.039 * TB, 81_920 * MiB, _DATASHEET + "; memory as nvidia-smi reports it"),
        Accelerator("A100 40GB", 312 * TB, 1.555 * TB, 40_960 * MiB, _DATASHEET + "; memory as nvidia-smi reports it"),
        Accelerator("L4", 121 * TB, 0.300 * TB, 24 * GB, _DATASHEET),
        Accelerator("L40S", 362 * TB, 0.864 * TB, 48 * GB, _DATASHEET),
        Accelerator("RTX 4090", 165 * TB, 1.008 * TB, 24 * GB, _DATASHEET + "; fp32 accumulate"),
        Accelerator("MI300X", 1307 * TB, 5.3 * TB, 192 * GB, "AMD CDNA3 datasheet (dense bf16)"),
        Accelerator("B200", 2250 * TB, 8.0 * TB, 180 * GB, _DATASHEET),
    ]
}


@dataclass(frozen=True)
class PublishedDecode:
    """A published batch-1 decode measurement, to set a reader's own beside (shared/reference/facts.md)."""

    model: str
    device: str
    ms_per_token: float  # measured
    source: str
    predicted_ms: float | None = None  # the source's own bandwidth-bound prediction, if it gives one

    @property
    def tokens_per_s(self) -> float:
        return 1e3 / self.ms_per_token


PUBLISHED: dict[str, PublishedDecode] = {
    "gpt-fast": PublishedDecode("Llama-3.1-8B, bf16", "A100 SXM 80GB", 1e3 / 93.9,
                                "gpt-fast README: 93.9 tokens/s at batch 1 (A100-80GB, 330 W)"),
    "kipply": PublishedDecode("13B, 2-byte weights", "A100", 22.0,
                              "Kipply, Transformer Inference Arithmetic: 16.8 ms predicted, 22.0 ms measured",
                              predicted_ms=16.8),
}


def table_row(name: str) -> Accelerator | None:
    """The row of ACCELERATORS for a device as its driver names it ("NVIDIA H200" -> "H200 SXM"): of the rows
    whose model (the row name's first word) is a word of `name`, the one sharing most words with it ("NVIDIA
    H100 PCIe" -> "H100 PCIe"; a tie goes to the first row); None for a device the table lacks."""
    words = set(name.replace("-", " ").split())
    rows = [(len(words & set(row.split())), hw) for row, hw in ACCELERATORS.items() if row.split()[0] in words]
    return max(rows, key=lambda r: r[0], default=(0, None))[1]


def ridge_point(hw: Accelerator) -> float:
    """FLOPs per byte where compute-bound and bandwidth-bound meet: peak FLOP/s / bandwidth."""
    return hw.flops / hw.bandwidth


def roofline_time(flops: float, nbytes: float, hw: Accelerator) -> float:
    """Least seconds to do `flops` FLOPs while moving `nbytes` bytes on `hw`."""
    return max(flops / hw.flops, nbytes / hw.bandwidth)


def roofline_time_by_part(parts: "Mapping[str, OpCost]", hw: Accelerator) -> dict[str, float]:
    """Least seconds for each part ({name: OpCost}, e.g. `cost.decode_parts`) on `hw`, each on its own roofline.

    Parts run one after the other, so a step takes at least the sum of these. That
    sum is never less than `roofline_time` of the totals, and it is more whenever
    one part is compute-bound and another bandwidth-bound: the aggregate lets the
    compute that one part leaves idle absorb the other's arithmetic, which does
    not happen when they run in turn.
    """
    return {name: roofline_time(p.flops, p.bytes, hw) for name, p in parts.items()}


def roofline_time_in_parts(parts: "Mapping[str, OpCost]", hw: Accelerator) -> float:
    """Least seconds for one pass whose parts run in turn: the sum of `roofline_time_by_part`."""
    return sum(roofline_time_by_part(parts, hw).values())


def roofline_time_of_passes(passes: "Iterable[Mapping[str, OpCost]]", hw: Accelerator) -> float:
    """Least seconds for passes run one after another (e.g. `cost.generation_passes`), each in parts."""
    return sum(roofline_time_in_parts(parts, hw) for parts in passes)

"""Chapter 1's two-GPU exercise: what tensor parallelism saves a decode step, and what its all-reduces cost.

Pure arithmetic, no torch. Megatron-style tensor parallelism (Shoeybi et al. 2019) splits every layer over n
devices: attention by heads (wq wk wv by columns, wo by rows) and the MLP by its hidden units (w1 w3 by
columns, w2 by rows). Each device then holds and reads 1/n of every weight matrix, and each row-split
product leaves every device with a partial sum of the layer's output: an all-reduce after attention and
another after the MLP, two per layer per forward pass.

Counted for one decode step at batch B (bandwidth-bound, as a decode step at small batch is):

- reading: the step's bytes (weights once, the KV cache once; `cost.decode_bytes`) at the memory bandwidth,
  split n ways (the embedding table and the norms too, a slight flattery);
- each all-reduce: a fixed latency plus a ring's traffic, 2(n − 1)/n × the message's bytes (B × d_model
  activations) over one direction of the link (kipply 2022 derives the same two all-reduces per layer).

Not counted: compute, launch overheads, overlap of communication with reading.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import cost, hardware

# NVLink 4 on an H100 SXM: 18 links, 900 GB/s per GPU both directions together (NVIDIA's H100 datasheet), so
# 450 GB/s each way. The chapter cites the scaling book (Austin et al. 2025) for it.
H100_NVLINK_ONE_WAY = 450e9  # bytes/s
# A small all-reduce's fixed cost (launch, synchronisation, one hop): an assumption for the exercise, not a
# measurement. The break-even latency below needs no such assumption.
ALLREDUCE_LATENCY = 10e-6  # seconds


@dataclass
class TensorParallel:
    """One decode step of `model` on one device against `n` devices sharing it (seconds, bytes)."""

    model: str
    device: str
    n: int
    batch: int
    context: int
    step_bytes: int
    bandwidth: float
    link_bandwidth: float
    latency: float
    n_layers: int
    message_bytes: int
    bytes_per_param: int = 2

    @property
    def t_one(self) -> float:
        """One device: the step's bytes at its memory bandwidth."""
        return self.step_bytes / self.bandwidth

    @property
    def t_read_split(self) -> float:
        """Each of n devices reads 1/n of the bytes, at the same time."""
        return self.t_one / self.n

    @property
    def allreduces(self) -> int:
        """Two per layer: after attention and after the MLP."""
        return 2 * self.n_layers

    @property
    def t_allreduce_bytes(self) -> float:
        """One all-reduce's traffic: a ring moves 2(n − 1)/n of the message through each device's link."""
        return 2 * (self.n - 1) / self.n * self.message_bytes / self.link_bandwidth

    @property
    def t_allreduce(self) -> float:
        return self.latency + self.t_allreduce_bytes

    @property
    def t_split(self) -> float:
        """n devices: the split read, then every all-reduce in turn (each waits for its layer's products)."""
        return self.t_read_split + self.allreduces * self.t_allreduce

    @property
    def break_even_latency(self) -> float:
        """The all-reduce latency at which n devices are no faster than one: the read time saved, spread over
        the all-reduces, less each one's traffic."""
        return (self.t_one - self.t_read_split) / self.allreduces - self.t_allreduce_bytes

    def numbers(self) -> dict:
        return {"tp_model": self.model, "tp_device": self.device, "tp_n": self.n, "tp_context": self.context,
                "tp_step_gb": self.step_bytes / 1e9, "tp_bw_tbs": self.bandwidth / 1e12,
                "tp_t_one_ms": self.t_one * 1e3, "tp_t_read_ms": self.t_read_split * 1e3,
                "tp_layers": self.n_layers, "tp_allreduces": self.allreduces,
                "tp_d": self.message_bytes // (self.batch * self.bytes_per_param),
                "tp_msg_kb": self.message_bytes / 1e3, "tp_link_gbs": self.link_bandwidth / 1e9,
                "tp_link_both_gbs": 2 * self.link_bandwidth / 1e9, "tp_saved_ms": (self.t_one - self.t_read_split) * 1e3,
                "tp_ar_bytes_ns": self.t_allreduce_bytes * 1e9, "tp_latency_us": self.latency * 1e6,
                "tp_comm_ms": self.allreduces * self.t_allreduce * 1e3, "tp_t_split_ms": self.t_split * 1e3,
                "tp_speedup": self.t_one / self.t_split, "tp_break_even_us": self.break_even_latency * 1e6}


def tensor_parallel(model: str = "llama-3-8b", device: str = "H100 SXM", n: int = 2, batch: int = 1,
                    context: int = 1024, bytes_per_param: int = 2, link_bandwidth: float = H100_NVLINK_ONE_WAY,
                    latency: float = ALLREDUCE_LATENCY) -> TensorParallel:
    """A decode step of `model` at `context` positions on `device` (an `hardware.ACCELERATORS` name), alone and
    split over `n` of them joined by links of `link_bandwidth` (bytes/s each way)."""
    if n < 2:
        raise ValueError(f"Tensor parallelism splits a layer over 2 or more devices, got n={n}.")
    cfg = cost.get_config(model)
    step = cost.decode_bytes(cfg, context, batch, bytes_per_param).total
    return TensorParallel(model, device, n, batch, context, step, hardware.ACCELERATORS[device].bandwidth,
                          link_bandwidth, latency, cfg.n_layers, batch * cfg.d_model * bytes_per_param, bytes_per_param)

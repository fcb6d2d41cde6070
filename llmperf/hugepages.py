"""Weights in huge pages: memory that a stream of weights reads with 512 times fewer address translations.

A processor translates every address it reads through its TLB, a small cache of page translations. A decode step
reads hundreds of megabytes of weights in order, once each, and so touches a new page every 4 KiB: each page's
first read misses the TLB and waits for the page tables to be walked. Linux can back memory with 2 MiB pages
instead (transparent huge pages), which the same stream crosses 512 times less often. It does so for an anonymous
mapping that was advised to (madvise MADV_HUGEPAGE) before it was first written, where
/sys/kernel/mm/transparent_hugepage/enabled says "madvise" or "always". A tensor from `torch.empty` gets this where
PyTorch was told to before it loaded (THP_MEM_ALLOC_ENABLE=1), and otherwise only by chance: NumPy advises its own
arrays of 4 MiB and more, and the C allocator may hand that memory on.

`empty` allocates a CPU tensor in a fresh mapping so advised (`cat` and `contiguous` make their copies there);
`materialize` gives a model's parameters one such
mapping, each parameter a view of it (weights.empty_model). Elsewhere (another system, a tensor under 2 MiB, a
kernel that refuses the advice) the memory is ordinary, and nothing else changes: the advice is a hint, and the
values are the same either way. `advised` says whether a tensor's memory was advised, from /proc/self/smaps.
"""

from __future__ import annotations

import math
import mmap

import numpy as np
import torch

HUGE_PAGE = 2 << 20
"""Bytes in one huge page on x86-64 and most Arm Linux kernels: 2 MiB. A tensor smaller than this gains nothing."""

ALIGNMENT = 64
"""Bytes each parameter's start is rounded up to, in `materialize`: one cache line, as PyTorch's allocator aligns."""


def can_advise() -> bool:
    """Can this system be asked for huge pages (Python's mmap offers MADV_HUGEPAGE: Linux)?"""
    return hasattr(mmap, "MADV_HUGEPAGE") and hasattr(mmap, "MAP_PRIVATE")


def empty(shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised CPU tensor of `shape` and `dtype`, C-contiguous, in a fresh private mapping advised for huge
    pages and starting on a huge page's boundary; torch.empty where that cannot help (under `HUGE_PAGE`) or cannot
    be had (`can_advise`). The mapping lives as long as the tensor or any view of it."""
    shape = tuple(int(n) for n in shape)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < HUGE_PAGE or not can_advise():
        return torch.empty(shape, dtype=dtype)
    mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # a kernel without transparent huge pages: ordinary pages
        pass
    raw = np.frombuffer(mapping, np.uint8)  # the array holds the mapping; the tensor will hold the array
    start = -raw.ctypes.data % HUGE_PAGE  # the first huge page's boundary
    return torch.from_numpy(raw[start:start + nbytes]).view(dtype).view(shape)


def cat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """torch.cat(tensors) along the first axis, into `empty` memory where they are on the CPU."""
    if tensors[0].device.type != "cpu":
        return torch.cat(tensors)
    shape = (sum(t.shape[0] for t in tensors), *tensors[0].shape[1:])
    return torch.cat(tensors, out=empty(shape, tensors[0].dtype))


def contiguous(tensor: torch.Tensor) -> torch.Tensor:
    """A C-contiguous copy of `tensor` (a transposed view, say), in `empty` memory where it is on the CPU."""
    if tensor.device.type != "cpu":
        return tensor.contiguous()
    return empty(tensor.shape, tensor.dtype).copy_(tensor)


def materialize(model: torch.nn.Module) -> None:
    """Give every parameter of `model` (built on the meta device, in its final dtype) memory in one `empty` block,
    uninitialised: each parameter becomes a view of it, 64-byte aligned, in the order the model lists them. A
    parameter shared by two modules (a tied LM head) is allocated once and stays shared."""
    params = list(model.named_parameters())  # each shared parameter once
    sizes = [-(-p.numel() * p.element_size() // ALIGNMENT) * ALIGNMENT for _, p in params]
    block = empty((sum(sizes),), torch.uint8)
    placed, at = {}, 0
    for (_, p), size in zip(params, sizes):
        placed[p] = torch.nn.Parameter(block[at:at + p.numel() * p.element_size()].view(p.dtype).view(p.shape),
                                       requires_grad=p.requires_grad)
        at += size
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[name] = placed[p]
    for module in model.modules():  # buffers: small tables, in ordinary memory
        for name, b in list(module._buffers.items()):
            if b is not None and b.is_meta:
                module._buffers[name] = torch.empty(b.shape, dtype=b.dtype)


def advised(tensor: torch.Tensor) -> bool | None:
    """Was `tensor`'s memory advised for huge pages (the "hg" flag of its mapping in /proc/self/smaps)? None where
    there is no /proc/self/smaps to read."""
    address = tensor.data_ptr()
    try:
        lines = open("/proc/self/smaps").read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split(" ", 1)[0]
        if "-" in head and ":" not in head:  # a mapping's first line: "start-end perms ..."
            low, high = (int(n, 16) for n in head.split("-"))
            inside = low <= address < high
        elif inside and line.startswith("VmFlags:"):
            return "hg" in line.split()[1:]
    return False

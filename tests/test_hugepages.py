"""Weights in memory advised for huge pages (llmperf.hugepages): the tensors are ordinary tensors with the same values,
a model's parameters are views of one block with a tied head still shared, and the advice reaches the kernel where
this system takes it."""

import mmap
from dataclasses import replace

import pytest
import torch

from llmperf import build_model, hugepages
from llmperf.config import get_config
from llmperf.fast import fuse

linux = pytest.mark.skipif(not hugepages.can_advise() or hugepages.advised(torch.zeros(1)) is None,
                           reason="huge pages are advised through Linux's madvise and seen in /proc/self/smaps")


@linux
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_large_tensor_gets_a_fresh_advised_mapping_on_a_huge_pages_boundary(dtype):
    t = hugepages.empty((1024, 1536), dtype)
    assert t.shape == (1024, 1536) and t.dtype == dtype and t.is_contiguous() and t.device.type == "cpu"
    assert t.data_ptr() % hugepages.HUGE_PAGE == 0 and hugepages.advised(t)
    t.fill_(3)  # written like any tensor
    assert t.sum().item() == 3 * 1024 * 1536


def test_a_small_tensor_or_a_system_without_the_advice_gets_torch_empty(monkeypatch):
    """The fallback makes no mapping of its own. Whether torch.empty's memory is advised is not asserted: NumPy
    advises its own arrays of 4 MiB and more, and the C allocator may hand that memory on to torch.empty."""
    def no_mapping(*args, **kwargs):
        raise AssertionError("hugepages.empty made a mapping of its own")

    monkeypatch.setattr(mmap, "mmap", no_mapping)
    small = hugepages.empty((4, 5))
    assert small.shape == (4, 5) and small.dtype == torch.float32
    monkeypatch.delattr(mmap, "MADV_HUGEPAGE", raising=False)
    assert not hugepages.can_advise()
    large = hugepages.empty((1024, 1024), torch.bfloat16)
    assert large.shape == (1024, 1024) and large.dtype == torch.bfloat16 and large.is_contiguous()


def test_copies_into_it_equal_torchs_own():
    parts = [torch.randn(700, 576), torch.randn(300, 576)]
    assert torch.equal(hugepages.cat(parts), torch.cat(parts))
    w = torch.randn(1024, 700)
    t = hugepages.contiguous(w.t())
    assert t.is_contiguous() and torch.equal(t, w.t())


@linux
def test_a_models_parameters_are_views_of_one_advised_block_and_a_tied_head_stays_shared():
    cfg = replace(get_config("tiny"), vocab_size=8192)  # a 2 MiB embedding: a block worth advising
    model = build_model(cfg, device="cpu", seed=0)
    params = list(model.parameters())
    assert model.output.weight is model.tok_embeddings.weight
    storages = {p.untyped_storage().data_ptr() for p in params}
    assert len(storages) == 1  # one block
    assert all(p.data_ptr() % hugepages.ALIGNMENT == 0 for p in params)
    again = build_model(cfg, device="cpu", seed=0)  # the same values as ever, from the seed
    assert all(torch.equal(a, b) for a, b in zip(params, again.parameters()))
    assert sum(p.nbytes for p in params) >= hugepages.HUGE_PAGE and hugepages.advised(params[0])


@linux
def test_smollm2_and_its_fused_copies_are_in_advised_memory(smollm2):
    model, _ = smollm2
    assert hugepages.advised(model.layers[0].attention.wo.weight) and hugepages.advised(model.output.weight)
    fast = fuse(model)
    assert hugepages.advised(fast.layers[0].feed_forward.w13.weight)  # a new matrix, in its own mapping

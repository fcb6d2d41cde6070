"""The model computes the same thing with and without its KV cache, and in either attention path."""

import pytest
import torch

from llmperf import generate
from llmperf.generation import decode_step, new_cache, prefill


def cached_logits(model, tokens, n_prefill, static=False):
    """Logits at every position: prefill the first n_prefill tokens, then decode the rest one by one."""
    cache = new_cache(model, tokens.shape[0], tokens.shape[1], static=static)
    with torch.inference_mode():
        first = prefill(model, tokens[:, :n_prefill], cache, all_logits=True)  # (B, n_prefill, V)
        rest = [decode_step(model, tokens[:, p:p + 1], p, cache) for p in range(n_prefill, tokens.shape[1])]
    return torch.cat([first, torch.stack(rest, dim=1)], dim=1)


def test_cache_matches_full_recompute_tiny(tiny):
    tokens = torch.randint(0, tiny.cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        full = tiny(tokens)
    assert torch.allclose(cached_logits(tiny, tokens, 10), full, atol=1e-5)
    assert torch.allclose(cached_logits(tiny, tokens, 10, static=True), full, atol=1e-5)


@pytest.mark.parametrize("static", [False, True])
def test_prompt_fed_in_chunks_matches_one_prefill(tiny, static):
    """prefill(start=...) extends a cached sequence: three chunks give the logits of one pass."""
    tokens = torch.randint(0, tiny.cfg.vocab_size, (2, 21), generator=torch.Generator().manual_seed(2))
    cache = new_cache(tiny, 2, 24, static=static)
    with torch.inference_mode():
        full = tiny(tokens)
        chunks = [prefill(tiny, tokens[:, a:b], cache, start=a, all_logits=True) for a, b in ((0, 8), (8, 9), (9, 21))]
    assert torch.allclose(torch.cat(chunks, dim=1), full, atol=1e-5)


def test_decode_step_takes_its_position_as_a_tensor(tiny):
    tokens = torch.randint(0, tiny.cfg.vocab_size, (1, 6), generator=torch.Generator().manual_seed(3))
    a, b = new_cache(tiny, 1, 6), new_cache(tiny, 1, 6)
    with torch.inference_mode():
        prefill(tiny, tokens[:, :5], a), prefill(tiny, tokens[:, :5], b)
        assert torch.equal(decode_step(tiny, tokens[:, 5:], 5, a), decode_step(tiny, tokens[:, 5:], torch.tensor([5]), b))


def test_the_cache_decides_what_attention_reads(tiny):
    """Dynamic: the filled prefix, unmasked for one token. Static: the whole buffer, unwritten positions masked."""
    dynamic, static = new_cache(tiny, 1, 10), new_cache(tiny, 1, 10, static=True)
    dynamic.begin_pass(torch.tensor([6]), 1)
    assert dynamic.mask(torch.tensor([6])) is None and dynamic.n_keys == 7
    dynamic.begin_pass(torch.arange(3), 1)
    assert dynamic.mask(torch.arange(3)).tolist() == [[True, False, False], [True, True, False], [True] * 3]
    static.begin_pass(torch.tensor([6]), 1)
    assert static.mask(torch.tensor([6])).tolist() == [[True] * 7 + [False] * 3] and static.n_keys == 10
    k = torch.ones(1, tiny.cfg.n_kv_heads, 1, tiny.cfg.head_dim)
    dynamic.begin_pass(torch.tensor([6]), 1)
    assert dynamic.update(0, torch.tensor([6]), k, k)[0].shape[2] == 7  # positions 0..6
    assert static.update(0, torch.tensor([6]), k, k)[0].shape[2] == 10


def test_smollm2_cached_logits_match_full_recompute(smollm2):
    model, tok = smollm2
    tokens = torch.tensor([tok.encode("The quick brown fox jumps over the lazy dog because it")])
    with torch.inference_mode():
        full = model(tokens)
    cached = cached_logits(model, tokens, 5)
    assert (cached - full).abs().max().item() < 1e-3  # float32 summation order differs slightly


def test_smollm2_naive_and_cached_give_identical_tokens(smollm2):
    model, tok = smollm2
    prompt = tok.encode("Once upon a time, in a small village,")
    cached = generate(model, prompt, 32, cache=True)
    naive = generate(model, prompt, 32, cache=False)
    assert cached.shape == (32,)
    assert cached.tolist() == naive.tolist()


def test_chat_answer_names_paris(smollm2):
    model, tok = smollm2
    answer = generate(model, tok.encode_chat("What is the capital of France?"), 24, stop_ids=[tok.eos_id])
    assert "Paris" in tok.decode(answer)


def test_tied_head_shares_the_embedding(smollm2, tiny):
    for model in (smollm2[0], tiny):
        assert model.output.weight.data_ptr() == model.tok_embeddings.weight.data_ptr()


def test_loaded_config_equals_preset(smollm2):
    from llmperf import PRESETS

    assert smollm2[0].cfg == PRESETS["smollm2-135m"]


def test_prefill_returns_last_position(tiny):
    tokens = torch.randint(0, tiny.cfg.vocab_size, (3, 9), generator=torch.Generator().manual_seed(3))
    cache = new_cache(tiny, 3, 16)
    with torch.inference_mode():
        last = prefill(tiny, tokens, cache)
        full = tiny(tokens)
    assert last.shape == (3, tiny.cfg.vocab_size)
    assert torch.allclose(last, full[:, -1], atol=1e-6)
    assert cache.nbytes == 2 * tiny.cfg.n_layers * 3 * tiny.cfg.n_kv_heads * 16 * tiny.cfg.head_dim * 4


def test_last_only_equals_last_row_of_full_logits(tiny):
    tokens = torch.randint(0, tiny.cfg.vocab_size, (2, 11), generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        assert torch.allclose(tiny(tokens, last_only=True)[:, 0], tiny(tokens)[:, -1], atol=1e-6)


def test_prompts_padded_at_the_end_prefill_as_each_alone(tiny):
    """Prompts of 9, 4 and 6 tokens padded to 9: with their lengths, each row's logits are its own last token's,
    and its keys and values at positions 0..n-1 are those it writes alone (causal attention: the padding comes
    after every real token, which never sees it)."""
    lengths = [9, 4, 6]
    tokens = torch.randint(1, tiny.cfg.vocab_size, (3, 9), generator=torch.Generator().manual_seed(6))
    for b, n in enumerate(lengths):
        tokens[b, n:] = 0  # the padding
    together = new_cache(tiny, 3, 9)
    with torch.inference_mode():
        logits = prefill(tiny, tokens, together, lengths=torch.tensor(lengths))
        for b, n in enumerate(lengths):
            alone = new_cache(tiny, 1, n)
            assert torch.allclose(logits[b], prefill(tiny, tokens[b:b + 1, :n], alone)[0], atol=1e-5)
            assert torch.allclose(together.k[:, b, :, :n], alone.k[:, 0], atol=1e-6)


def test_the_gguf_is_read_as_gguf_reads_it():
    """open_gguf's reader (a plain view of the file's mapping) gives every metadata field and tensor exactly as
    gguf's own GGUFReader does."""
    import numpy as np
    from gguf import GGUFReader

    from llmperf.tokenizer import open_gguf, smollm2_gguf_path

    ours, theirs = open_gguf(), GGUFReader(smollm2_gguf_path())
    assert type(ours.data) is np.ndarray and isinstance(theirs.data, np.memmap)
    assert list(ours.fields) == list(theirs.fields) and len(ours.tensors) == len(theirs.tensors) == 272
    for key, field in theirs.fields.items():
        mine = ours.fields[key]
        assert (mine.types, mine.data, mine.offset) == (field.types, field.data, field.offset), key
        assert all(np.array_equal(a, b) for a, b in zip(mine.parts, field.parts, strict=True)), key
    for mine, tensor in zip(ours.tensors, theirs.tensors):
        assert (mine.name, mine.tensor_type, list(mine.shape)) == (tensor.name, tensor.tensor_type, list(tensor.shape))
        assert np.array_equal(mine.data, tensor.data), mine.name

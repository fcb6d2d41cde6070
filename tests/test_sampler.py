"""The batched sampler: per-row temperature, top-k, top-p and seed, the same tokens as `generate` gives each seeded
row alone, the nucleus as Holtzman et al. define it, and no host synchronisation."""

import math

import pytest
import torch

from llmperf import generate, stream
from llmperf.generation import decode_step, new_cache, prefill, sample
from llmperf.sampler import probabilities, sample_rows

# (temperature, top_k, top_p, seed) per row: greedy, seeded with each filter and both, unseeded, tiny temperature.
ROWS = [
    (0.0, None, 1.0, None),
    (0.8, None, 1.0, 11),
    (1.0, 5, 1.0, 12),
    (1.3, None, 0.7, 13),
    (0.6, 20, 0.9, 14),
    (1.0, None, 1.0, None),
    (1e-30, None, 0.5, 15),
    (2.0, 40, 0.95, 16),
    (0.0, 3, 0.5, 17),
]
PROMPTS = [[5, 6, 7], [1, 2], [9, 8, 7, 6], [3], [200, 1, 4], [17, 17], [40, 41, 42], [255, 0], [8, 9]]


@torch.inference_mode()
def served_together(model, prompts, n, rows) -> torch.Tensor:
    """Each prompt decoded in its own cache, as `generate` decodes it, but every step's logits stacked (B, vocab)
    and sampled by one `sample_rows` call: (B, n) tokens."""
    temperature, top_k, top_p, seeds = zip(*rows)
    generators = [None if s is None else torch.Generator().manual_seed(s) for s in seeds]
    caches = [new_cache(model, 1, len(p) + n) for p in prompts]
    logits = torch.cat([prefill(model, torch.tensor([p]), c) for p, c in zip(prompts, caches)])  # (B, vocab)
    out = []
    for step in range(n):
        tokens = sample_rows(logits, temperature, top_k, top_p, generators)  # (B,)
        out.append(tokens)
        if step < n - 1:
            logits = torch.cat([decode_step(model, tokens[b:b + 1, None], len(p) + step, c)
                                for b, (p, c) in enumerate(zip(prompts, caches))])  # (B, vocab)
    return torch.stack(out, dim=1)  # (B, n)


@pytest.mark.parametrize("order", ["as listed", "reversed"])
def test_each_seeded_or_greedy_row_gets_the_tokens_generate_gives_it_alone(tiny, order):
    prompts, rows = (PROMPTS, ROWS) if order == "as listed" else (PROMPTS[::-1], ROWS[::-1])
    together = served_together(tiny, prompts, 12, rows)
    for b, (prompt, (t, k, p, seed)) in enumerate(zip(prompts, rows)):
        if t > 0 and seed is None:
            continue  # drawn from the default generator: any token will do
        alone = generate(tiny, prompt, 12, temperature=t, top_k=k, top_p=p, seed=seed)
        assert together[b].tolist() == alone.tolist(), (t, k, p, seed)


def test_rows_without_a_seed_draw_from_the_default_generator(tiny):
    logits = torch.randn(3, 256, generator=torch.Generator().manual_seed(0))
    args = ([0.9] * 3, [5] * 3, [0.8] * 3)
    torch.manual_seed(1)
    rows = sample_rows(logits, *args, [None] * 3)
    torch.manual_seed(1)
    assert rows.tolist() == sample(logits, 0.9, 5, None, 0.8)[:, 0].tolist()
    torch.manual_seed(1)
    assert rows.tolist() == torch.multinomial(probabilities(logits, *args), 1)[:, 0].tolist()


def test_a_seeded_row_is_torch_multinomial_on_its_probabilities_alone():
    """The draw written out (argmax of probs / Exp(1) noise) is torch.multinomial's, bit for bit, on a row whose
    probabilities are bitwise those of the row alone, whatever the other rows are."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 3000, generator=g) * 4
    temperature = [0.7, 1.0, 0.3, 1.5, 1e-40, 0.9]
    top_k = [None, 50, 7, None, 3, 1000]
    top_p = [1.0, 0.9, 1.0, 0.5, 1.0, 0.99]
    batch = probabilities(logits, temperature, top_k, top_p)
    for seed in range(40):
        tokens = sample_rows(logits, temperature, top_k, top_p, [torch.Generator().manual_seed(seed + b)
                                                                 for b in range(6)])
        for b in range(6):
            alone = probabilities(logits[b:b + 1], temperature[b:b + 1], top_k[b:b + 1], top_p[b:b + 1])
            assert torch.equal(batch[b:b + 1], alone)
            drawn = torch.multinomial(alone, 1, generator=torch.Generator().manual_seed(seed + b))
            assert int(tokens[b]) == int(drawn)


@pytest.mark.parametrize("temperature", [0.7, 0.3, 1.3, 1e-3, 2.0, 0.123456789, 1e-30, torch.finfo(torch.float32).tiny])
def test_dividing_by_a_column_of_temperatures_is_dividing_by_the_number(temperature):
    """On a CPU a float32 tensor divided by a Python float and by a (B, 1) float32 column holding it gives the
    same floats: both round the quotient of the same two float32 numbers."""
    x = torch.randn(5, 4096, generator=torch.Generator().manual_seed(0)) * 20
    assert torch.equal(x / temperature, x / torch.full((5, 1), temperature))


def test_greedy_rows_take_the_argmax_whatever_is_sampled_beside_them():
    logits = torch.randn(4, 100, generator=torch.Generator().manual_seed(2))
    argmax = logits.argmax(dim=-1)
    assert sample_rows(logits, [0.0] * 4, [None] * 4, [1.0] * 4, [None] * 4).tolist() == argmax.tolist()
    mixed = sample_rows(logits, [0.0, 1.0, 0.0, 1.5], [None, None, 2, None], [1.0, 0.5, 0.1, 1.0], [None] * 4)
    assert mixed[[0, 2]].tolist() == argmax[[0, 2]].tolist()
    assert mixed.dtype == torch.long and mixed.shape == (4,)


def hand_made(probs) -> torch.Tensor:
    """Logits (1, vocab) whose softmax is `probs`."""
    return torch.tensor([probs]).log()


@pytest.mark.parametrize("top_p, kept", [(0.05, [0]), (0.39, [0]), (0.5, [0, 1]), (0.69, [0, 1]),
                                         (0.75, [0, 1, 2]), (0.95, [0, 1, 2, 3]), (1.0, [0, 1, 2, 3])])
def test_top_p_keeps_the_smallest_set_that_reaches_it(top_p, kept):
    """Probabilities 0.4, 0.3, 0.2, 0.1 (shuffled): the most likely tokens, in order, until their sum reaches p."""
    order = [2, 0, 3, 1]  # token i has probability [0.4, 0.3, 0.2, 0.1][order.index(i)]: ranks 0..3 shuffled
    probs = [[0.4, 0.3, 0.2, 0.1][order.index(i)] for i in range(4)]
    out = probabilities(hand_made(probs), [1.0], [None], [top_p])[0]
    assert sorted(i for i in range(4) if out[i] > 0) == sorted(order[r] for r in kept)
    mass = sum(probs[order[r]] for r in kept)
    assert out.tolist() == pytest.approx([p / mass if p > 0 and out[i] > 0 else 0.0 for i, p in enumerate(probs)],
                                         rel=1e-5)


def test_top_p_1_filters_nothing_even_where_the_sum_rounds_to_1_early():
    """A top token of probability 1 - 1e-12 makes the float32 running sum 1.0 at once: top_p 1 still keeps the
    tail, alone or beside a row that filters; a top_p just under 1 keeps the top token only."""
    logits = torch.tensor([[0.0] + [-30.0] * 9]).expand(2, 10)
    out = probabilities(logits, [1.0, 1.0], [None, None], [1.0, 0.999999])
    assert torch.equal(out[0], torch.softmax(logits[0], dim=-1)) and (out[0] > 0).all()
    assert (out[1] > 0).sum() == 1
    assert torch.equal(probabilities(logits[:1], [1.0], [None], [1.0]), out[:1])


def test_a_top_k_past_the_vocabulary_keeps_every_token():
    logits = torch.randn(2, 50, generator=torch.Generator().manual_seed(4))
    out = probabilities(logits, [1.0, 1.0], [10**30, 3], [1.0, 1.0])
    assert torch.equal(out[0], torch.softmax(logits[0], dim=-1)) and (out[1] > 0).sum() == 3


def test_top_k_comes_before_top_p():
    """After top-k 2, 0.4 and 0.3 become 4/7 and 3/7: top_p 0.5 then keeps the first alone (applied the other way
    round it would keep both)."""
    out = probabilities(hand_made([0.4, 0.3, 0.2, 0.1]), [1.0], [2], [0.5])[0]
    assert out.tolist() == [1.0, 0.0, 0.0, 0.0]


def test_a_top_p_that_is_0_in_float32_still_keeps_the_top_token():
    logits = torch.randn(2, 50, generator=torch.Generator().manual_seed(3))
    out = probabilities(logits, [1.0, 1.0], [None, None], [1e-300, 5e-324])
    assert out.argmax(dim=-1).tolist() == logits.argmax(dim=-1).tolist() and (out.max(dim=-1).values == 1).all()


def test_unseeded_rows_follow_the_nucleus_distribution():
    torch.manual_seed(0)
    n = 20_000
    logits = hand_made([0.4, 0.3, 0.2, 0.1]).expand(n, 4)
    counts = torch.bincount(sample_rows(logits, [1.0] * n, [None] * n, [0.5] * n, [None] * n), minlength=4)
    assert counts[2:].sum() == 0
    assert counts[0] / n == pytest.approx(4 / 7, abs=0.015)


def test_generate_and_stream_take_top_p(tiny):
    nucleus = generate(tiny, [5, 6, 7], 10, temperature=1.0, top_p=1e-6, seed=4)
    assert nucleus.tolist() == generate(tiny, [5, 6, 7], 10).tolist()
    sampled = generate(tiny, [5, 6, 7], 10, temperature=1.2, top_k=30, top_p=0.8, seed=9)
    streamed = [t for t, _ in stream(tiny, [5, 6, 7], 10, temperature=1.2, top_k=30, top_p=0.8, seed=9)]
    assert streamed == sampled.tolist()
    assert generate(tiny, [5, 6, 7], 10, temperature=1.0, top_p=1.0, seed=4).tolist() == \
        generate(tiny, [5, 6, 7], 10, temperature=1.0, seed=4).tolist()


def test_sample_rows_reads_no_tensor_value_on_the_host(monkeypatch):
    """Every way Python reads a tensor's value onto the host (which on a GPU waits for the device) raises during
    the call."""
    logits = torch.randn(len(ROWS), 256, generator=torch.Generator().manual_seed(0))
    temperature, top_k, top_p, seeds = zip(*ROWS)
    generators = [None if s is None else torch.Generator().manual_seed(s) for s in seeds]

    def refuse(*args, **kwargs):
        raise AssertionError("a tensor's value was read on the host")

    for name in ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    tokens = sample_rows(logits, temperature, top_k, top_p, generators)
    with pytest.raises(AssertionError, match="read on the host"):
        int(tokens[0])  # the patch was in force
    monkeypatch.undo()
    assert tokens.shape == (len(ROWS),)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: torch's sync debug mode reports syncs there")
def test_sample_rows_does_not_synchronise_cuda():
    logits = torch.randn(len(ROWS), 49_152, device="cuda")
    temperature, top_k, top_p, seeds = zip(*ROWS)
    generators = [None if s is None else torch.Generator(device="cuda").manual_seed(s) for s in seeds]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        tokens = sample_rows(logits, temperature, top_k, top_p, generators)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert tokens.device.type == "cuda" and tokens.shape == (len(ROWS),)


@pytest.mark.parametrize("args, words", [
    (([1.0], [None], [1.0], [None]), "temperature must give one value per row: 2 rows of logits, 1 temperature"),
    (([1.0, 1.0], [None, None], [1.0, 0.0], [None, None]), "top_p must lie in (0, 1] for every row"),
    (([1.0, 1.0], [None, None], [1.0, math.nan], [None, None]), "top_p must lie in (0, 1]"),
    (([1.0, -1.0], [None, None], [1.0, 1.0], [None, None]), "temperature must be 0 (greedy) or more"),
    (([1.0, 1.0], [0, None], [1.0, 1.0], [None, None]), "top_k must be at least 1"),
    (([1.0, 1.0], [None, None], [1.0, 1.0], [None]), "generators must give one value per row"),
])
def test_bad_rows_are_refused_before_any_work(args, words):
    with pytest.raises(ValueError) as caught:
        sample_rows(torch.zeros(2, 8), *args)
    assert words in str(caught.value)

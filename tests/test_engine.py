"""The serving loop: batched requests give the tokens each would get alone; the policies admit as documented."""

import pytest

from llmperf import generate
from llmperf.engine import Engine, Request

PROMPTS = [[5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9], [42], [3, 1, 4, 1, 5], [9, 9, 9, 9]]
MAX_TOKENS = [4, 9, 2, 6, 3]


@pytest.mark.parametrize("policy", ["continuous", "static"])
def test_batched_requests_get_the_tokens_they_get_alone(tiny, policy):
    engine = Engine(tiny, max_batch=2, capacity=32, policy=policy)
    requests = [engine.submit(Request(p, n)) for p, n in zip(PROMPTS, MAX_TOKENS)]
    engine.run()
    for r in requests:
        assert r.finish_reason == "length" and len(r.tokens) == r.max_tokens
        assert r.tokens == generate(tiny, r.prompt, r.max_tokens).tolist(), r.id
        assert len(r.token_times) == len(r.tokens) and r.token_times == sorted(r.token_times)
        assert r.token_times[0] >= r.sent
    assert engine.idle and engine.active == 0


def test_the_fused_engine_gives_smollm2_the_same_tokens_as_the_plain_one(smollm2):
    """The server's engine runs the fused model (NumPy steps, one matrix product per weight for the whole
    batch): four requests decoded together get, token for token, what the plain model gives them together and
    what it gives each alone."""
    from llmperf.fast import fuse

    model, tok = smollm2
    prompts = [tok.encode_chat(q) for q in ("Name three planets.", "What is 7 times 8?", "Say hello in French.",
                                            "Why is the sky blue?")]
    got = {}
    for name, m in (("plain", model), ("fused", fuse(model, pack=True))):  # as the server fuses it
        engine = Engine(m, max_batch=4, capacity=128)
        requests = [engine.submit(Request(p, 12 + 2 * i)) for i, p in enumerate(prompts)]
        engine.run()
        got[name] = [r.tokens for r in requests]
    assert got["fused"] == got["plain"]
    assert got["fused"][1] == generate(model, prompts[1], 14).tolist()


def first_token_order(tiny, policy):
    engine = Engine(tiny, max_batch=2, capacity=32, policy=policy)
    a, b, c = (engine.submit(Request([1, 2, 3], n)) for n in (2, 10, 3))
    engine.run()
    return a, b, c


def test_continuous_batching_refills_a_free_slot_at_once(tiny):
    a, b, c = first_token_order(tiny, "continuous")
    assert a.token_times[-1] <= c.token_times[0] < b.token_times[-1]  # c starts when a ends, while b still runs


def test_static_batching_waits_for_the_whole_batch(tiny):
    a, b, c = first_token_order(tiny, "static")
    assert c.token_times[0] > b.token_times[-1]  # c waits for the batch's longest request


def test_sampling_and_stop_tokens_follow_each_request(tiny):
    alone = generate(tiny, [5, 6, 7], 8, temperature=0.9, top_k=5, seed=11).tolist()
    engine = Engine(tiny, max_batch=3, capacity=32)
    sampled = engine.submit(Request([5, 6, 7], 8, temperature=0.9, top_k=5, seed=11))
    greedy = generate(tiny, [1, 2], 8).tolist()
    stopped = engine.submit(Request([1, 2], 8, stop_ids=(greedy[2],)))
    engine.run()
    assert sampled.tokens == alone
    assert stopped.tokens == greedy[:greedy.index(greedy[2]) + 1] and stopped.finish_reason == "stop"


def test_cancelled_requests_free_their_slot(tiny):
    engine = Engine(tiny, max_batch=1, capacity=32)
    running = engine.submit(Request([1, 2, 3], 20))
    queued = engine.submit(Request([4, 5], 20))
    engine.step()
    assert engine.active == 1 and engine.waiting == 1
    engine.cancel(running)
    engine.cancel(queued)
    engine.step()
    assert running.finish_reason == queued.finish_reason == "cancelled"
    assert engine.idle and queued.tokens == [] and engine.finished == {"cancelled": 2}
    late = engine.submit(Request([7], 2))
    engine.run()
    assert late.tokens == generate(tiny, [7], 2).tolist()  # the freed slot serves the next request correctly


@pytest.mark.parametrize("request_kwargs, message", [
    (dict(prompt=[], max_tokens=4), "prompt is empty"),
    (dict(prompt=[1], max_tokens=0), "new tokens asked for must be at least 1"),
    (dict(prompt=[1] * 30, max_tokens=3), "more than the context of 32"),
    (dict(prompt=[1], max_tokens=2, temperature=-1.0), "temperature must be a number from 0"),
    (dict(prompt=[1], max_tokens=2, top_k=0), "top_k must be at least 1"),
    (dict(prompt=[10**6], max_tokens=2), "Token ids must lie in"),
])
def test_bad_requests_are_refused_before_queueing(tiny, request_kwargs, message):
    engine = Engine(tiny, max_batch=2, capacity=32)
    with pytest.raises(ValueError, match=message):
        engine.submit(Request(**request_kwargs))
    assert engine.idle


@pytest.mark.parametrize("kwargs, message", [
    (dict(policy="fifo"), "Unknown batching policy"), (dict(max_batch=0), "max_batch must be at least 1"),
    (dict(capacity=10**6), "capacity must lie in"),
])
def test_bad_engine_settings(tiny, kwargs, message):
    with pytest.raises(ValueError, match=message):
        Engine(tiny, **kwargs)


def test_requests_ending_out_of_order_keep_their_own_blocks_and_tokens(tiny):
    """Requests of very different lengths end in any order; each gives its blocks back as it ends, the blocks held
    are those of the requests in flight, and every request still gets exactly its own tokens."""
    engine = Engine(tiny, max_batch=3, capacity=40, block_size=4)
    lengths = [7, 1, 12, 2, 5, 9, 1, 3, 11, 4]
    requests = [engine.submit(Request([(7 * i) % 50 + 1, 3, i + 2], n)) for i, n in enumerate(lengths)]
    while not engine.idle:
        engine.step()
        blocks = engine.scheduler.blocks
        assert len(blocks.tables) == engine.active and blocks.num_free + sum(map(len, blocks.tables.values())) \
            >= blocks.num_blocks
    assert engine.scheduler.blocks.num_free == engine.scheduler.blocks.num_blocks
    for r in requests:
        assert r.tokens == generate(tiny, list(r.prompt), r.max_tokens).tolist(), r.id


def test_a_request_being_prefilled_counts_as_active(tiny, monkeypatch):
    """The server's /health reports active + waiting; a request must be in one of them during its prefill, or
    the count misses it (and Little's Law, measured by polling, comes out short)."""
    import llmperf.runner as runner_module

    engine = Engine(tiny, max_batch=2, capacity=32)
    seen = []
    real_prefill = runner_module.prefill

    def watching_prefill(*args, **kwargs):
        seen.append(engine.active + engine.waiting)
        return real_prefill(*args, **kwargs)

    monkeypatch.setattr(runner_module, "prefill", watching_prefill)
    engine.submit(Request([1, 2, 3], 2))
    engine.run()
    assert seen == [1]


def failing_on(monkeypatch, name: str, when):
    """Make llmperf.runner's `name` (sample_rows or decode_step) raise RuntimeError on the calls for which
    `when(*args)` is true, as a request the engine cannot serve would make it fail."""
    import llmperf.runner as runner_module

    real = getattr(runner_module, name)

    def flaky(*args):
        if when(*args):
            raise RuntimeError(f"{name} failed here")
        return real(*args)

    monkeypatch.setattr(runner_module, name, flaky)


def test_a_request_that_fails_fails_alone(tiny, monkeypatch):
    """A request whose first token's draw fails (seed 666), and one whose third token's does (seed 667), end with
    finish reason "error" and what failed; the requests decoded beside them get the tokens they get alone, and a
    seeded one beside them the tokens its seed gives it alone."""
    drawn = {666: 0, 667: 0}  # draws that succeeded, by seed

    def doomed(logits, temperature, top_k, top_p, generators):
        seeds = [g.initial_seed() for g in generators if g is not None and g.initial_seed() in drawn]
        if any(drawn[s] == (0 if s == 666 else 2) for s in seeds):
            return True  # alone or beside others: it fails again when drawn alone
        for s in seeds:
            drawn[s] += 1
        return False

    failing_on(monkeypatch, "sample_rows", doomed)
    engine = Engine(tiny, max_batch=4, capacity=32)
    good = [engine.submit(Request(p, 9)) for p in PROMPTS[:2]]
    bad = [engine.submit(Request([5, 6], 9, temperature=1.0, seed=s)) for s in (666, 667)]
    good.append(engine.submit(Request(PROMPTS[2], 9)))
    seeded = engine.submit(Request([5, 6], 9, temperature=1.0, seed=5))
    engine.run()
    assert [r.tokens for r in good] == [generate(tiny, r.prompt, 9).tolist() for r in good]
    assert seeded.tokens == generate(tiny, [5, 6], 9, temperature=1.0, seed=5).tolist()
    assert [(r.finish_reason, len(r.tokens)) for r in bad] == [("error", 0), ("error", 2)]
    assert all(r.error == "RuntimeError: sample_rows failed here" for r in bad)
    assert engine.finished == {"length": 4, "error": 2} and engine.idle


def test_a_failed_decode_pass_ends_its_batch_and_not_the_waiting_requests(tiny, monkeypatch):
    failures = iter([True])
    failing_on(monkeypatch, "decode_step", lambda *args: next(failures, False))
    engine = Engine(tiny, max_batch=2, capacity=32)
    requests = [engine.submit(Request(p, 4)) for p in PROMPTS[:4]]
    engine.run()
    assert [r.finish_reason for r in requests] == ["error", "error", "length", "length"]
    assert requests[0].error == "RuntimeError: decode_step failed here" and len(requests[0].tokens) == 1
    assert [r.tokens for r in requests[2:]] == [generate(tiny, r.prompt, 4).tolist() for r in requests[2:]]


def test_a_newcomers_first_token_is_delivered_before_the_decode_pass(tiny):
    """With `deliver`, the tokens leave as soon as they exist: a newcomer's first token right after its prefill,
    then the decode pass's, so that a server's TTFT does not also wait for the decode pass."""
    engine = Engine(tiny, max_batch=2, capacity=32)
    old = engine.submit(Request([1, 2, 3], 5))
    engine.step()  # `old` is decoding
    new = engine.submit(Request([4, 5], 3))
    handed: list[list[Request]] = []
    out = engine.step(deliver=lambda tokens: handed.append([r for r, _, _ in tokens]))
    assert handed == [[new], [new, old]] or handed == [[new], [old, new]]  # the first token, then the decode's
    assert [r for r, _, _ in out] == [r for batch in handed for r in batch]  # returned as well, in that order


def test_prefill_groups_keep_padding_small():
    from llmperf.prefills import PREFILL_CHUNK, prefill_groups

    assert prefill_groups([]) == []
    assert prefill_groups([32, 32, 32, 32]) == [[0, 1, 2, 3]]  # equal prompts: one pass, no padding
    assert prefill_groups([30, 32, 28, 3]) == [[0, 1, 2], [3]]  # 3 tokens padded to 32 would be mostly padding
    assert prefill_groups([3, 400, 5]) == [[0], [1], [2]]
    assert prefill_groups([PREFILL_CHUNK // 2] * 3) == [[0, 1], [2]]  # the pass's positions are bounded


def test_newcomers_prefilled_together_get_the_tokens_they_get_alone(tiny, monkeypatch):
    """Four newcomers of 4, 5, 4 and 5 tokens: one prefill pass of (4, 5), padded at the end; each gets what it
    gets alone. If that pass fails, each is prefilled again alone, and still gets them."""
    import llmperf.runner as runner_module

    prompts, shapes = [[5, 6, 7, 8], [1, 2, 3, 4, 5], [42, 7, 9, 9], [3, 1, 4, 1, 5]], []
    real_prefill = runner_module.prefill

    def watched(model, tokens, cache, **kwargs):
        shapes.append(tuple(tokens.shape))
        if fail and tokens.shape[0] > 1:
            raise RuntimeError("a pass of several prompts failed")
        return real_prefill(model, tokens, cache, **kwargs)

    monkeypatch.setattr(runner_module, "prefill", watched)
    for fail in (False, True):
        shapes.clear()
        engine = Engine(tiny, max_batch=4, capacity=32)
        requests = [engine.submit(Request(p, 6)) for p in prompts]
        engine.run()
        assert shapes == ([(4, 5)] if not fail else [(4, 5), (1, 4), (1, 5), (1, 4), (1, 5)])
        assert [r.tokens for r in requests] == [generate(tiny, p, 6).tolist() for p in prompts]
        assert engine.finished == {"length": 4} and engine.prefills[4] == 1 and engine.prompt_tokens == 18


def test_prefill_pieces_and_steps():
    from llmperf.prefills import prefill_piece, prefill_steps

    assert prefill_piece(1, 10, 4) == 4 and prefill_piece(1, 3, 4) == 3  # a prompt alone: as much as fits
    assert prefill_piece(2, 3, 6) == 3 and prefill_piece(2, 3, 5) == 0  # a group: whole, or not this step
    assert prefill_piece(1, 3, -2) == 0  # a failed pass may have spent more than was left
    assert prefill_steps([], 4) == 0
    assert prefill_steps([10], 4) == 3  # pieces of 4, 4 and 2
    assert prefill_steps([2, 2, 2, 2], 4) == 2  # two groups of two prompts, one a step
    assert prefill_steps([3, 9], 4) == 3  # 3 alone, then 1 of the 9 fits; 4, 4 later
    assert prefill_steps([32] * 4, 512) == 1


def test_a_long_prompt_is_prefilled_in_pieces_while_the_batch_decodes(tiny, monkeypatch):
    """With prefill_chunk=4, a 10-token prompt arriving while another request decodes is prefilled in pieces of
    4, 4 and 2 tokens, one a step, and the other request gets a token at each of those steps; both get the
    tokens they get alone."""
    import llmperf.runner as runner_module

    shapes, real_prefill = [], runner_module.prefill

    def watched(model, tokens, cache, start=0, **kwargs):
        shapes.append((tuple(tokens.shape), start))
        return real_prefill(model, tokens, cache, start=start, **kwargs)

    monkeypatch.setattr(runner_module, "prefill", watched)
    engine = Engine(tiny, max_batch=2, capacity=32, prefill_chunk=4)
    short = engine.submit(Request([5, 6, 7], 8))
    engine.step()
    long = engine.submit(Request(list(range(1, 11)), 3))
    produced = [len(engine.step()) for _ in range(3)]  # the short one's token; then also long's first two
    assert shapes[1:] == [((1, 4), 0), ((1, 4), 4), ((1, 2), 8)]
    assert produced == [1, 1, 3] and engine.active == 2
    engine.run()
    assert short.tokens == generate(tiny, short.prompt, 8).tolist()
    assert long.tokens == generate(tiny, long.prompt, 3).tolist()
    assert engine.prompt_tokens == 13 and engine.prefills == {1: 2, 0: sum(engine.prefills.values()) - 2}


def test_a_request_cancelled_or_failing_between_its_pieces_frees_its_slot(tiny, monkeypatch):
    import llmperf.runner as runner_module

    real_prefill = runner_module.prefill

    def failing(model, tokens, cache, start=0, **kwargs):
        if start >= 4:
            raise RuntimeError("the second piece failed")
        return real_prefill(model, tokens, cache, start=start, **kwargs)

    for how in ("cancelled", "error"):
        if how == "error":
            monkeypatch.setattr(runner_module, "prefill", failing)
        engine = Engine(tiny, max_batch=1, capacity=32, prefill_chunk=4)
        long, after = engine.submit(Request(list(range(1, 11)), 3)), engine.submit(Request([5, 6, 7], 4))
        engine.step()
        assert engine.active == 1 and engine.waiting == 1 and long.tokens == []
        if how == "cancelled":
            engine.cancel(long)
        engine.run()
        assert long.finish_reason == how and long.tokens == [] and engine.idle
        assert after.tokens == generate(tiny, after.prompt, 4).tolist()


def test_prefill_chunk_must_be_positive(tiny):
    with pytest.raises(ValueError, match="prefill_chunk"):
        Engine(tiny, capacity=32, prefill_chunk=0)


@pytest.mark.parametrize("device_type, gib, name, want", [
    ("cpu", 64, "AMD EPYC", 512),                     # llama.cpp's micro-batch
    ("cuda", 44, "NVIDIA L40S", 2048),                # vLLM's OpenAI server on a GPU
    ("cuda", 139, "NVIDIA H200", 8192),               # ... on one of 70 GiB or more
    ("cuda", 79, "NVIDIA A100-SXM4-80GB", 2048),      # ... but not an A100, where larger budgets cut throughput
    ("mps", 128, "Apple GPU (arm64)", 2048),          # a Mac's memory is the system's: no large budget
])
def test_the_default_prefill_chunk_comes_from_the_device(device_type, gib, name, want):
    from llmperf.prefills import default_chunk

    assert default_chunk(device_type, gib * 2**30, name) == want


def test_an_engine_prefills_the_devices_default_chunk(tiny):
    from llmperf.device import prefill_chunk

    assert prefill_chunk(tiny.device) == 512 and Engine(tiny, capacity=32).prefill_chunk == prefill_chunk(tiny.device)
    assert Engine(tiny, capacity=32, prefill_chunk=7).prefill_chunk == 7


def test_the_fused_engine_prefills_in_pieces_to_the_same_tokens(tiny):
    """The fused model's pieces of one token run as its NumPy decode step (a piece of 10 tokens in threes ends
    with one): the tokens are still those of the plain model alone."""
    from llmperf.fast import fuse

    engine = Engine(fuse(tiny), max_batch=2, capacity=32, prefill_chunk=3)
    requests = [engine.submit(Request(list(range(1, 11)), 5)), engine.submit(Request([4, 2], 5))]
    engine.run()
    assert [r.tokens for r in requests] == [generate(tiny, r.prompt, 5).tolist() for r in requests]

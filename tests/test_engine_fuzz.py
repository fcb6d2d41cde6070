"""A property-based test of the serving loop's scheduling, with Hypothesis.

Requests of random prompts (some sharing a prefix), lengths and sampling (greedy or seeded) arrive at random
steps, some are cancelled at random steps, into an engine of random batch size, policy, prefill chunk, block size
and KV pool (from one full context up: small pools preempt), with prefix caching on or off. Whatever the schedule:
every request not cancelled gets exactly the tokens it gets alone; no step prefills more positions than its chunk;
the engine never holds more requests than max_batch; and it ends idle, every request ended and counted once, every
block given back.
"""

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llmperf import generate
from llmperf.engine import Engine, Request

SHARED = [7, 8, 9, 10, 11, 12, 13, 14]
request = st.tuples(st.booleans(),  # whether the prompt begins with SHARED
                    st.lists(st.integers(0, 255), min_size=1, max_size=8),  # prompt
                    st.integers(1, 12),  # max_tokens
                    st.one_of(st.none(), st.integers(0, 99)),  # seed: None is greedy, else sampled at temperature 1
                    st.integers(0, 6),  # the step it arrives before
                    st.one_of(st.none(), st.integers(0, 8)))  # the step it is cancelled before, if any


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(request, min_size=1, max_size=6), max_batch=st.integers(1, 3),
       policy=st.sampled_from(["continuous", "static"]), chunk=st.integers(1, 16), block_size=st.integers(1, 4),
       spare=st.integers(0, 3), caching=st.booleans())
def test_any_schedule_gives_each_request_its_own_tokens(tiny, monkeypatch, requests, max_batch, policy, chunk,
                                                        block_size, spare, caching):
    import llmperf.runner as runner_module

    positions, real_prefill = [], runner_module.prefill

    def counted(model, tokens, cache, **kwargs):
        positions[-1] += tokens.numel()  # rows × tokens, padding included
        return real_prefill(model, tokens, cache, **kwargs)

    monkeypatch.setattr(runner_module, "prefill", counted)
    capacity = max(len(SHARED) * shared + len(prompt) + n for shared, prompt, n, *_ in requests)
    blocks = -(-capacity // block_size) + spare  # from one full context up: small pools preempt
    engine = Engine(tiny, max_batch=max_batch, capacity=capacity, policy=policy, prefill_chunk=chunk,
                    block_size=block_size, num_blocks=blocks, prefix_caching=caching)
    sent: list[tuple[Request, int | None]] = []
    step = 0
    while step < 300 and (step <= 6 or not engine.idle):
        for shared, prompt, n, seed, arrives, cancel in requests:
            if arrives == step:
                r = Request(SHARED + prompt if shared else prompt, n, temperature=0.0 if seed is None else 1.0,
                            seed=seed)
                sent.append((engine.submit(r), cancel if cancel is None else step + cancel))
        for r, cancel in sent:
            if cancel == step:
                engine.cancel(r)
        positions.append(0)
        engine.step()
        assert positions[-1] <= chunk, f"step {step} prefilled {positions[-1]} positions, more than {chunk}"
        assert engine.active <= max_batch
        step += 1
    assert engine.idle, "the engine never finished"
    for r, cancel in sent:
        assert r.done, r
        if r.finish_reason != "cancelled":
            alone = generate(tiny, r.prompt, r.max_tokens, temperature=r.temperature, seed=r.seed).tolist()
            assert r.finish_reason == "length" and r.tokens == alone
    assert sum(engine.finished.values()) == len(sent)
    assert engine.scheduler.blocks.num_free == blocks
    event(f"preempted: {engine.scheduler.preemptions > 0}")
    event(f"prefix hits: {engine.scheduler.blocks.hits > 0}")


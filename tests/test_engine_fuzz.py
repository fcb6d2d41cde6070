"""A property-based test of the serving loop's scheduling, with Hypothesis.

Requests of random prompts and lengths arrive at random steps, some are cancelled at random steps, into an
engine of random batch size, policy and prefill chunk. Whatever the schedule: every request not cancelled gets
exactly the tokens it gets alone; no step prefills more positions than its chunk; the engine never holds more
requests than its slots; and it ends idle, every request ended and counted once.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmperf import generate
from llmperf.engine import Engine, Request

request = st.tuples(st.lists(st.integers(0, 255), min_size=1, max_size=12),  # prompt
                    st.integers(1, 4),  # max_tokens
                    st.integers(0, 6),  # the step it arrives before
                    st.one_of(st.none(), st.integers(0, 8)))  # the step it is cancelled before, if any


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(request, min_size=1, max_size=6), max_batch=st.integers(1, 3),
       policy=st.sampled_from(["continuous", "static"]), chunk=st.integers(1, 16))
def test_any_schedule_gives_each_request_its_own_tokens(tiny, monkeypatch, requests, max_batch, policy, chunk):
    import llmperf.engine as engine_module

    positions, real_prefill = [], engine_module.prefill

    def counted(model, tokens, cache, **kwargs):
        positions[-1] += tokens.numel()  # rows × tokens, padding included
        return real_prefill(model, tokens, cache, **kwargs)

    monkeypatch.setattr(engine_module, "prefill", counted)
    engine = Engine(tiny, max_batch=max_batch, capacity=32, policy=policy, prefill_chunk=chunk)
    sent: list[tuple[Request, int | None]] = []
    step = 0
    while step < 200 and (step <= 6 or not engine.idle):
        for prompt, n, arrives, cancel in requests:
            if arrives == step:
                sent.append((engine.submit(Request(prompt, n)), cancel if cancel is None else step + cancel))
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
            assert r.finish_reason == "length" and r.tokens == generate(tiny, r.prompt, r.max_tokens).tolist()
    assert sum(engine.finished.values()) == len(sent)
    assert engine.prompt_tokens <= sum(len(r.prompt) for r, _ in sent)


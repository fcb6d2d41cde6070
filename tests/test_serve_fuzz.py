"""A property-based test of the server's request parser and validator, with Hypothesis.

Bodies are drawn with every field either absent, a plausible value (in range or just out of it) or any JSON
value at all, NaN, huge integers and lone surrogates included. An oracle written here from the field table
(`llmperf.serve.protocol`'s docstring) and OpenAI's ranges, not from the server's code, says which fields of a
body are wrong. Then each body sent to a running server must be either

- valid (no field wrong): served, 200, with the tokens it asked for; or
- invalid: refused with a 4xx whose `param` is one of the fields the oracle found wrong, and whose message
  starts with that field's name (clients often show only the message).

Nothing else passes: a server that refused too much, or too little, or refused for the wrong field, or
answered anything with a 500, fails, so a blanket catch-all cannot pass.
"""

import json
import math

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llmperf.serve.protocol import DEFAULT_ONLY, IGNORED
from tests.served import NAME, events, running, small_app

CAPACITY = 64
VOCAB = 49_152
ROLES = ("system", "developer", "user", "assistant")

any_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)
text = st.text(max_size=40) | st.builds(lambda a, b: a + "\ud800" + b, st.text(max_size=5), st.text(max_size=5))
counts = st.integers(-3, CAPACITY + 3)


def sometimes(*plausible, edges=()):
    """A field's value: one of the `edges` of its range (half the time, if any), one of `plausible`'s, or any
    JSON value."""
    anything = st.one_of(*plausible, any_json)
    return st.one_of(st.sampled_from(edges), anything) if edges else anything


many = [1] * CAPACITY
EDGES = {  # values at and just past the edge of each field's range, and of each type it might be sent as
    "model": [NAME.upper(), NAME + " ", "", 0],
    "max_tokens": [0, 1, -1, 1.0, True, "8", CAPACITY - 2, CAPACITY - 1, CAPACITY, 2**63],
    "max_completion_tokens": [0, 1, -1, 1.0, True, "8", CAPACITY - 2, CAPACITY - 1, CAPACITY],
    "temperature": [-1e-9, 0, 0.0, 2, 2.0, 2 + 1e-9, 3, math.nan, math.inf, -math.inf, 1e-300, 5e-324, True, "1"],
    "top_k": [-2, -1, 0, 1, 1.0, True, "5", VOCAB, 10**30],
    "seed": [0, -1, 2**63 - 1, 2**63, -2**63, -2**63 - 1, 2**64, 1.0, True, "7"],
    "stop": ["", "\ud800", [], ["a"] * 4, ["a"] * 5, ["a", ""], [1], [["a"]], {"a": 1}],
    "stream": [0, 1, "true", []],
    "stream_options": [{}, {"include_usage": 1}, {"include_usage": "yes"}, {"include_usage": None}, [], True],
    "ignore_eos": [0, 1, "true", None],
    "top_p": [0, 0.0, -1e-9, 1e-300, 5e-324, 0.5, 1, 1.0, 1 + 1e-9, 2, math.nan, math.inf, True, "1"],
    "n": [1, 2, 0, 1.0, True], "logprobs": [False, True, 0, 1],
    "prompt": ["", "\ud800", [], [0], [VOCAB - 1], [VOCAB], [-1], many[:CAPACITY - 4], many[1:], many, [1.0],
               [True], ["a"], [[1, 2]], "<|im_end|>", {"text": "hi"}],
    "messages": [[], [{"role": "tool", "content": "x"}], [{"role": "user"}], [{"role": "assistant"}],
                 [{"role": "assistant", "content": None}], [{"role": "user", "content": [{"type": "image_url"}]}],
                 [{"role": "user", "content": []}], [{"role": "user", "content": "\udfff"}], [{"content": "x"}],
                 [{"role": "user", "content": "word " * CAPACITY}], ["user"], {"role": "user", "content": "x"}],
}
COMMON = {
    "model": sometimes(st.just(NAME), edges=EDGES["model"]),
    "max_tokens": sometimes(counts, edges=EDGES["max_tokens"]),
    "max_completion_tokens": sometimes(counts, edges=EDGES["max_completion_tokens"]),
    "temperature": sometimes(st.floats(-1, 3), st.integers(-1, 3), edges=EDGES["temperature"]),
    "top_k": sometimes(st.integers(-3, VOCAB + 3), edges=EDGES["top_k"]),
    "top_p": sometimes(st.floats(-1, 2), st.integers(-1, 2), edges=EDGES["top_p"]),
    "seed": sometimes(st.integers(-2**64, 2**64), edges=EDGES["seed"]),
    "stop": sometimes(text, st.lists(text, max_size=5), edges=EDGES["stop"]),
    "stream": sometimes(st.booleans(), edges=EDGES["stream"]),
    "stream_options": sometimes(st.fixed_dictionaries({}, optional={"include_usage": sometimes(st.booleans())}),
                                edges=EDGES["stream_options"]),
    "ignore_eos": sometimes(st.booleans(), edges=EDGES["ignore_eos"]),
    **{name: sometimes(st.just(default), edges=EDGES.get(name, ())) for name, default in DEFAULT_ONLY.items()},
    **{name: any_json for name in IGNORED},
    "some_other_servers_extension": any_json,
}
part = st.fixed_dictionaries({"type": sometimes(st.just("text")), "text": sometimes(text)})
message = st.fixed_dictionaries({"role": sometimes(st.sampled_from(ROLES), st.just("tool"))},
                                optional={"content": sometimes(text, st.lists(part, max_size=3))})
PROMPTS = {"prompt": sometimes(text, st.lists(st.integers(-2, VOCAB + 2), max_size=CAPACITY + 2),
                              edges=EDGES["prompt"]),
           "messages": sometimes(st.lists(message, max_size=3), edges=EDGES["messages"])}
# The fields each run of the test is aimed at: the prompt (or the messages) and the fields whose values are judged.
TARGETS = ("prompt", *(name for name in EDGES if name not in ("prompt", "messages")))

# A request the server must serve, before its fields are mutated.
good_text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=30)
VALID_PROMPTS = {
    "prompt": good_text | st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=20),
    "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": good_text | st.lists(
        st.fixed_dictionaries({"type": st.just("text"), "text": good_text}), min_size=1, max_size=2)}),
        min_size=1, max_size=2)}
VALID = {
    "max_tokens": st.integers(1, 24), "max_completion_tokens": st.integers(1, 24),
    "temperature": st.floats(0, 2) | st.integers(0, 2) | st.just(1e-300), "top_k": st.integers(-1, 100),
    "top_p": st.floats(0, 1, exclude_min=True) | st.just(1) | st.just(1e-300),
    "seed": st.integers(-2**63, 2**63 - 1), "stop": good_text | st.lists(good_text, max_size=4),
    "stream": st.booleans(), "ignore_eos": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}),
    **{name: st.sampled_from([default, None]) for name, default in DEFAULT_ONLY.items()},
    **{name: any_json for name in IGNORED},
}


@st.composite
def bodies(draw, chat: bool, target: str) -> dict:
    """A request the server must serve; then its `target` field (usually) and up to two others (any of them)
    left out or set to an edge of their range, a plausible value or any JSON value at all."""
    field = "messages" if chat else "prompt"
    body = draw(st.fixed_dictionaries({"model": st.just(NAME), field: VALID_PROMPTS[field]}, optional=VALID))
    strategies = {**COMMON, field: PROMPTS[field]}
    others = draw(st.lists(st.sampled_from(sorted(strategies)), max_size=2))
    for name in [field if target == "prompt" else target] * draw(st.sampled_from([1, 1, 1, 0])) + others:
        if draw(st.integers(0, 9)) == 0:
            body.pop(name, None)
        else:
            body[name] = draw(strategies[name])
    return body


def whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def valid_text(v) -> bool:
    return isinstance(v, str) and not any(0xD800 <= ord(c) <= 0xDFFF for c in v)


def content_text(m: dict):
    """A message's text, or None if its content is not text as OpenAI sends it."""
    content = m.get("content")
    if content is None and m.get("role") == "assistant":
        return ""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" and valid_text(p.get("text"))
                                         for p in content):
        return "\n".join(p["text"] for p in content)
    return content if valid_text(content) else None


def prompt_ids(body: dict, chat: bool, tokenizer):
    """The prompt's token ids, or None if the prompt (or the messages) is not one."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and m.get("role") in ROLES and content_text(m) is not None for m in messages):
            return None
        roles = {"developer": "system"}
        return tokenizer.encode(tokenizer.apply_chat_template(
            [{"role": roles.get(m["role"], m["role"]), "content": content_text(m)} for m in messages]))
    prompt = body.get("prompt")
    if valid_text(prompt):
        return tokenizer.encode(prompt)
    if isinstance(prompt, list) and all(whole(t) for t in prompt):
        return prompt
    return None


def same(value, default) -> bool:
    return isinstance(value, bool) == isinstance(default, bool) and value == default


def wrong_fields(body: dict, chat: bool, tokenizer) -> set[str]:
    """The oracle: every field of `body` that makes it invalid (empty: a request the server must serve)."""
    wrong = {name for name, default in DEFAULT_ONLY.items()
             if body.get(name) is not None and not same(body[name], default)}
    if body.get("model") != NAME:
        wrong.add("model")
    prompt_field = "messages" if chat else "prompt"
    ids = prompt_ids(body, chat, tokenizer)
    if ids is None or not ids or not all(0 <= t < VOCAB for t in ids) or len(ids) >= CAPACITY:
        wrong.add(prompt_field)
    length_field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    n = body.get(length_field)
    if n is not None and (not whole(n) or n < 1):
        wrong.add(length_field)
    elif prompt_field not in wrong:
        n = n if n is not None else (CAPACITY - len(ids) if chat else 16)
        if len(ids) + n > CAPACITY:
            wrong.add(length_field)
    t = body.get("temperature")
    if t is not None and not (number(t) and math.isfinite(t) and 0 <= t <= 2):
        wrong.add("temperature")
    k = body.get("top_k")
    if k is not None and not (whole(k) and (k >= 1 or k in (0, -1))):
        wrong.add("top_k")
    p = body.get("top_p")
    if p is not None and not (number(p) and math.isfinite(p) and 0 < p <= 1):
        wrong.add("top_p")
    seed = body.get("seed")
    if seed is not None and not (whole(seed) and -2**63 <= seed < 2**63):
        wrong.add("seed")
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop
    if stop is not None and not (isinstance(stops, list) and len(stops) <= 4
                                 and all(valid_text(s) and s for s in stops)):
        wrong.add("stop")
    for flag in ("stream", "ignore_eos"):
        if body.get(flag) is not None and not isinstance(body[flag], bool):
            wrong.add(flag)
    options = body.get("stream_options")
    if options is not None and not (isinstance(options, dict) and (
            options.get("include_usage") is None or isinstance(options["include_usage"], bool))):
        wrong.add("stream_options")
    return wrong


@pytest.fixture(scope="module")
def fuzzed(smollm2):
    _, tokenizer = smollm2
    with running(small_app(tokenizer, max_num_seqs=4, max_model_len=CAPACITY)) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            yield client, tokenizer


def served_or_refused(client, tokenizer, body: dict, chat: bool) -> None:
    """The property: `body` is served with the tokens it asked for if the oracle finds no field wrong, else
    refused with a 4xx naming a field the oracle found wrong."""
    wrong = wrong_fields(body, chat, tokenizer)
    r = client.post("/v1/chat/completions" if chat else "/v1/completions", content=json.dumps(body),
                    headers={"content-type": "application/json"})
    if wrong:
        assert 400 <= r.status_code < 500, (body, wrong, r.status_code, r.text)
        error = r.json()["error"]
        assert error["param"] in wrong, (body, wrong, r.text)
        assert error["message"].startswith(tuple(f"{error['param']}{c}" for c in ":[.")), (body, r.text)
        return
    assert r.status_code == 200, (body, r.text)
    if body.get("stream"):
        evs = events(r.text)
        assert r.text.rstrip().endswith("data: [DONE]"), r.text
        assert len([c for e in evs for c in e["choices"] if c["finish_reason"]]) == 1, r.text
        usage = evs[-1].get("usage")
        assert (usage is not None) == bool((body.get("stream_options") or {}).get("include_usage")), r.text
    else:
        usage = r.json()["usage"]
    if usage is not None:
        ids = prompt_ids(body, chat, tokenizer)
        asked = body.get("max_completion_tokens") or body.get("max_tokens") or (
            CAPACITY - len(ids) if chat else 16)
        assert usage["prompt_tokens"] == len(ids) and 1 <= usage["completion_tokens"] <= asked, (body, usage)
        if body.get("ignore_eos") and not body.get("stop"):
            assert usage["completion_tokens"] == asked, (body, usage)


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_every_edge_of_every_field(fuzzed, chat):
    """Each edge value of each field, alone in a request that is otherwise good."""
    client, tokenizer = fuzzed
    field = "messages" if chat else "prompt"
    good = {"model": NAME, field: [{"role": "user", "content": "Hi"}] if chat else "Hello", "max_tokens": 4}
    for name, values in EDGES.items():
        if name in ("prompt", "messages") and name != field:
            continue
        for value in values:
            served_or_refused(client, tokenizer, {**good, name: value}, chat)


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=16, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_every_body_is_served_or_refused_for_a_field_it_gets_wrong(fuzzed, chat, target, data):
    client, tokenizer = fuzzed
    body = data.draw(bodies(chat, target))
    event("valid" if not wrong_fields(body, chat, tokenizer) else "invalid")
    served_or_refused(client, tokenizer, body, chat)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_streamed_text_is_the_whole_text_cut_at_the_first_stop(smollm2, data):
    """Whatever the ids (pieces of characters, special tokens, anything), decoded incrementally and held back
    where a stop string could start, the chunks join to the whole answer's text cut before its first stop
    string, and no more than one chunk comes per token."""
    from llmperf.serve import Answer, Parsed

    _, tokenizer = smollm2
    pieces = [i for i in range(256, 1200) if tokenizer.decode([i]) == "\ufffd"]  # bytes of longer characters
    ids = data.draw(st.lists(st.integers(0, VOCAB - 1) | st.sampled_from(pieces) | st.sampled_from([0, 1, 2]),
                             max_size=30))
    whole = tokenizer.decode(ids, skip_special_tokens=True)
    stops = data.draw(st.lists(st.builds(lambda a, n: whole[a:a + n], st.integers(0, max(len(whole) - 1, 0)),
                                         st.integers(1, 6)) | st.text(min_size=1, max_size=3), max_size=2))
    stops = [s for s in stops if s]
    answer = Answer(Parsed([1], 64, 0.0, None, 1.0, None, (), tuple(stops), True, False, False), tokenizer, NAME)
    chunks = [answer.add(i) for i in ids if not answer.stopped]
    chunks.append(answer.flush())
    cut = min((at for at in (whole.find(s) for s in stops) if at != -1), default=len(whole))
    assert "".join(chunks) == whole[:cut] and answer.stopped == (cut < len(whole)), (ids, stops, chunks)

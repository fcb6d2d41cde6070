"""One table of bad generation parameters, fed to `generate`, to the engine and to the server: each refuses
every row with the same message naming the same field, because all three call `llmperf.request_checks.check`."""

import json
import math

import httpx
import pytest

from llmperf import generate
from llmperf.engine import Engine, Request
from llmperf.request_checks import InvalidParameter
from llmperf.fast import served
from tests.served import NAME, create_app, running, small_model

CONTEXT = 64  # the model's max_seq_len, the engine's capacity and the server's: one context for all three

# (prompt ids, max new tokens, {temperature, top_k, top_p, seed}), the field that is wrong, and words of its message.
BAD = [
    ([], 4, {}, "prompt", "The prompt is empty"),
    ([1, "a"], 4, {}, "prompt", "item 1 is 'a' (str)"),
    ([1, 2.5], 4, {}, "prompt", "item 1 is 2.5 (float)"),
    ([1, True], 4, {}, "prompt", "item 1 is True (bool)"),
    ([1, 49_152], 4, {}, "prompt", "Token ids must lie in [0, 49152)"),
    ([-1, 5], 4, {}, "prompt", "got ids from -1 to 5"),
    ([7] * CONTEXT, 1, {}, "prompt", "leaves no room for an answer"),
    ([1, 2], 0, {}, "max_tokens", "must be at least 1, got 0"),
    ([1, 2], -3, {}, "max_tokens", "must be at least 1, got -3"),
    ([1, 2], 2.5, {}, "max_tokens", "must be a whole number, got 2.5 (float)"),
    ([1, 2], "ten", {}, "max_tokens", "must be a whole number, got 'ten' (str)"),
    ([1, 2], CONTEXT, {}, "max_tokens", f"ask for at most {CONTEXT - 2} new tokens"),
    ([1, 2], 4, {"temperature": math.nan}, "temperature", "got nan"),
    ([1, 2], 4, {"temperature": math.inf}, "temperature", "got inf"),
    ([1, 2], 4, {"temperature": -0.5}, "temperature", "got -0.5"),
    ([1, 2], 4, {"temperature": 2.5}, "temperature", "from 0 (greedy) to 2"),
    ([1, 2], 4, {"temperature": "hot"}, "temperature", "got 'hot'"),
    ([1, 2], 4, {"temperature": True}, "temperature", "got True"),
    ([1, 2], 4, {"top_k": -5}, "top_k", "at least 1 (or left out: every token), got -5"),
    ([1, 2], 4, {"top_k": 1.5}, "top_k", "whole number, got 1.5"),
    ([1, 2], 4, {"top_p": 0}, "top_p", "top_p must be a number above 0 and at most 1 (1: every token), got 0"),
    ([1, 2], 4, {"top_p": -0.25}, "top_p", "got -0.25"),
    ([1, 2], 4, {"top_p": 1.5}, "top_p", "above 0 and at most 1 (1: every token), got 1.5"),
    ([1, 2], 4, {"top_p": math.nan}, "top_p", "got nan"),
    ([1, 2], 4, {"top_p": math.inf}, "top_p", "got inf"),
    ([1, 2], 4, {"top_p": "most"}, "top_p", "got 'most'"),
    ([1, 2], 4, {"top_p": True}, "top_p", "got True"),
    ([1, 2], 4, {"seed": 2**64}, "seed", "signed 64-bit integer"),
    ([1, 2], 4, {"seed": -2**63 - 1}, "seed", "signed 64-bit integer"),
    ([1, 2], 4, {"seed": 0.5}, "seed", "whole number, got 0.5"),
]
IDS = [f"{row[3]}-{i}" for i, row in enumerate(BAD)]


@pytest.fixture(scope="module")
def three(smollm2):
    """The same small model behind `generate`, an engine and a server, all with a context of CONTEXT tokens."""
    _, tokenizer = smollm2
    model = small_model(tokenizer, max_seq_len=CONTEXT)
    with running(create_app(served(model), tokenizer, model_name=NAME, max_num_seqs=2, max_model_len=CONTEXT)) as url:
        yield model, Engine(model, max_batch=2, capacity=CONTEXT), url


def refused(call) -> InvalidParameter:
    with pytest.raises(InvalidParameter) as caught:
        call()
    return caught.value


@pytest.mark.parametrize("prompt, max_tokens, sampling, param, words", BAD, ids=IDS)
def test_one_message_from_generate_the_engine_and_the_server(three, prompt, max_tokens, sampling, param, words):
    model, engine, url = three
    by_generate = refused(lambda: generate(model, prompt, max_tokens, **sampling))
    by_engine = refused(lambda: engine.submit(Request(prompt, max_tokens, **sampling)))
    body = json.dumps({"model": NAME, "prompt": prompt, "max_tokens": max_tokens, **sampling})  # NaN as NaN
    r = httpx.post(f"{url}/v1/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert words in by_generate.args[0], by_generate
    assert by_generate.args[0] == by_engine.args[0]  # the words, as `generate` and the engine raise them
    assert error["message"] == f"{param}: {by_generate.args[0]}"  # the server names the field first
    assert by_generate.param == by_engine.param == error["param"] == param
    assert engine.idle


def test_the_same_rows_are_served_once_mended(three):
    """Each row's field set right is served, by all three: the table tests the field it names, nothing else."""
    model, engine, url = three
    mended = {"prompt": [1, 2], "max_tokens": 3, "temperature": 0.5, "top_k": 5, "top_p": 0.9, "seed": 7}
    out = generate(model, mended["prompt"], 3, temperature=0.5, top_k=5, top_p=0.9, seed=7).tolist()
    request = engine.submit(Request(mended["prompt"], 3, temperature=0.5, top_k=5, top_p=0.9, seed=7))
    engine.run()
    r = httpx.post(f"{url}/v1/completions", json={"model": NAME, "ignore_eos": True, **mended})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    assert request.tokens == out


LENGTHS = ["16", 4.5, -1, 0, True, [4], 10_000]  # a string, a fraction, too few, a bool, a list, too many


@pytest.mark.parametrize("spelling", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
@pytest.mark.parametrize("value", LENGTHS, ids=repr)
def test_a_bad_length_is_refused_by_the_name_the_client_sent(three, spelling, chat, value):
    """Clients often show only the message: it starts with the field as the client spelled it, then explains."""
    _, _, url = three
    prompt = {"messages": [{"role": "user", "content": "Hi"}]} if chat else {"prompt": [1, 2]}
    r = httpx.post(f"{url}/v1/{'chat/' if chat else ''}completions", json={"model": NAME, spelling: value, **prompt})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == spelling and error["message"].startswith(f"{spelling}: The "), error
    assert "new tokens" in error["message"], error

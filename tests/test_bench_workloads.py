"""Synthetic text, datasets and traces for `python -m llmperf.bench`: text cut to a length by a tokenizer, vLLM's
ShareGPT rules, JSON Lines, Mooncake traces replayed at their times; bad files refused, naming the line, before any
request is sent; and each run end to end against the stub server (chat included), its JSON holding the client's
count of every prompt beside the server's."""

import json
import random

import pytest

from llmperf.bench import datasets, text
from llmperf.bench.cli import main
from tests.served import free_port
from tests.stub_server import started

NOWHERE = "http://127.0.0.1:9"  # nothing listens: a run that got as far as sending would fail to connect


@pytest.fixture(scope="module")
def sizer():
    return text.load_tokenizer()  # SmolLM2's, from its GGUF file (a few seconds, once)


@pytest.fixture(scope="module")
def stub():
    with started(free_port(), 0.005, 0.001) as url:
        yield url


def write(path, lines) -> str:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def test_synthetic_text_is_as_long_as_asked_by_its_tokenizer(sizer):
    corpus, rng = text.Corpus(sizer), random.Random(0)
    for n in (1, 2, 7, 128, 1000, 5000):  # 5000: longer than the corpus, which wraps round
        assert len(sizer.encode(corpus.text(n, rng))) == n
    assert corpus.text(50, random.Random(3)) == corpus.text(50, random.Random(3)) != corpus.text(50, random.Random(4))


def test_a_tokenizer_json_or_its_folder_counts_as_the_gguf_does(sizer, tmp_path):
    from llmperf.tokenizer import Tokenizer

    Tokenizer.from_gguf()._tok.save(str(tmp_path / "tokenizer.json"))
    sample = "Shall I compare thee to a summer's day? 12 tokens, or so."
    for where in (tmp_path, tmp_path / "tokenizer.json"):
        assert text.load_tokenizer(str(where)).encode(sample) == sizer.encode(sample)
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.json").write_text("{}")
    for where, said in ((tmp_path / "nonesuch", "no such file or folder"), (tmp_path / "empty", "no tokenizer.json"),
                        (tmp_path / "bad.json", "not a tokenizer.json")):
        with pytest.raises(ValueError, match=said):
            text.load_tokenizer(str(where))


def test_trace_prompts_share_the_blocks_their_hash_ids_share(sizer):
    corpus, rng = text.Corpus(sizer), random.Random(0)
    a, b, c = (sizer.encode(corpus.blocks(ids, 1000, rng)) for ids in ([1, 2], [1, 3], [4, 2]))
    assert a[:500] == b[:500] and a[520:] != b[520:] and a[:20] != c[:20]
    assert abs(len(a) - 1000) <= 2  # decoded once, so a block's edge may join a token differently
    assert len(sizer.encode(corpus.blocks([], 30, rng))) == 30  # no hash ids: text of its own


def sharegpt(prompt: str, answer: str, turns: int = 2) -> dict:
    said = [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}] + [{"from": "human", "value": "x"}]
    return {"id": prompt[:8], "conversations": said[:turns]}


def test_sharegpt_keeps_what_vllms_rules_keep(tmp_path):
    words = lambda s: len(s.split())  # noqa: E731 (a tokenizer that counts words)
    long = "w " * 1100
    entries = [sharegpt("a b c d e", "f g h i j k", turns=3), sharegpt("one two three", "a b c d e"),
               sharegpt("a b c d", "e f g"), sharegpt(long, "a b c d"), sharegpt("w " * 1000, "v " * 1100),
               sharegpt("p q r s", "t u v w"), sharegpt("only one turn here", "", turns=1), {"id": "none"}]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(entries))
    pairs = datasets.read_sharegpt(str(path))
    assert len(pairs) == 6  # at least two turns
    prompts, lengths, outputs = datasets.sample_sharegpt(pairs, words, 10, seed=0)
    assert sorted(zip(prompts, lengths, outputs)) == [("a b c d e", 5, 6), ("p q r s", 4, 4)]
    order = list(pairs)
    random.Random(0).shuffle(order)  # vLLM's order for seed 0
    assert prompts == [p for p, _ in order if p in prompts]
    with pytest.raises(ValueError, match=r"every one of its 2 .*shorter than 4 tokens 1, a prompt over 1024 tokens 1"):
        datasets.sample_sharegpt([pairs[2], pairs[3]], words, 10)


@pytest.mark.parametrize("content, said", [
    ("", r"not JSON \(Expecting value at line 1"),
    ('{"conversations": []}', r"a JSON list of entries, this holds a dict"),
    ('[{"conversations": [{"from": "human"}, {"from": "gpt", "value": "b"}]}]', r"entry 0 \(from 0\): each turn"),
    ('[{"conversations": [{"value": "a"}]}, {"id": 1}]', r"no entry has two turns"),
])
def test_a_bad_sharegpt_file_is_refused_saying_what_is_wrong(tmp_path, content, said):
    (tmp_path / "s.json").write_text(content)
    with pytest.raises(ValueError, match=said):
        datasets.read_sharegpt(str(tmp_path / "s.json"))


@pytest.mark.parametrize("lines, said", [
    (['{"prompt": "hi"}', '{"prompt": "a", '], r"line 2: not JSON"),
    (['{"prompt": "hi", "max_tokens": 3}'], r"line 1: unknown field 'max_tokens'; the fields are prompt"),
    (['', '{"prompt": "hi", "input_length": 3}'], r"line 2: give \"prompt\" \(text\) or \"input_length\""),
    (['{"input_length": 0}'], r"line 1: input_length is 0; a length is at least 1"),
    (['{"input_length": "3"}'], r"line 1: input_length is '3', not number"),
    (['{"prompt": 3}'], r"line 1: prompt is 3, not text"),
    (['[1, 2]'], r"line 1: each line is one JSON object"),
    (['', '  '], r"holds no requests"),
])
def test_a_bad_jsonl_dataset_is_refused_naming_its_line(tmp_path, lines, said):
    with pytest.raises(ValueError, match=said):
        datasets.read_jsonl(write(tmp_path / "d.jsonl", lines))


def test_a_file_that_is_not_utf8_text_is_refused_by_name(tmp_path):
    (tmp_path / "latin1.jsonl").write_bytes('{"prompt": "caf\u00e9"}\n'.encode("latin-1"))
    for read in (datasets.read_jsonl, datasets.read_trace, datasets.read_sharegpt):
        with pytest.raises(ValueError, match=r"latin1.jsonl: not UTF-8 text"):
            read(str(tmp_path / "latin1.jsonl"))


@pytest.mark.parametrize("lines, said", [
    ([{"timestamp": 0, "input_length": 3}], r"line 1: a trace's request needs output_length"),
    ([{"timestamp": 5, "input_length": 3, "output_length": 1}, {"timestamp": 4, "input_length": 3,
                                                                 "output_length": 1}], r"line 2: timestamp 4 comes"),
    ([{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_id": [1]}], r"unknown field 'hash_id'"),
    ([{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": ["a"]}], r"hash_ids are whole numbers"),
])
def test_a_bad_trace_is_refused_naming_its_line(tmp_path, lines, said):
    with pytest.raises(ValueError, match=said):
        datasets.read_trace(write(tmp_path / "t.jsonl", lines))


@pytest.mark.parametrize("how, said", [
    (["--dataset", "jsonl", "--dataset-path", "MISSING"], "--dataset-path MISSING: no such file"),
    (["--dataset", "jsonl", "--dataset-path", "BAD"], "line 2: not JSON"),
    (["--dataset", "jsonl", "--dataset-path", "UNKNOWN"], "unknown field 'text'"),
    (["--dataset", "sharegpt", "--dataset-path", "SHORT"], "was dropped by vLLM's rules"),
    (["--trace", "MISSING"], "--trace MISSING: no such file"),
    (["--trace", "BAD", "--rate", "2"], "leave out --rate and --sweep"),
    (["--dataset", "jsonl"], "--dataset and --dataset-path go together"),
    (["--prompts-file", "BAD", "--dataset", "jsonl", "--dataset-path", "BAD"], "choose one"),
    (["--prompts-file", "BAD", "--tokenizer", "BAD"], "a --prompts-file is sent as it is"),
])
def test_bad_inputs_stop_the_command_before_any_request(tmp_path, capsys, how, said):
    files = {"MISSING": str(tmp_path / "missing.jsonl"), "BAD": write(tmp_path / "bad.jsonl", ['{"prompt": "a"}', "{"]),
             "UNKNOWN": write(tmp_path / "unknown.jsonl", ['{"text": "a"}']),
             "SHORT": str(tmp_path / "short.json")}
    (tmp_path / "short.json").write_text(json.dumps([sharegpt("hi", "hello there, how are you today?")]))
    with pytest.raises(SystemExit) as e:
        main(["--url", NOWHERE, "--concurrency", "1", *[files.get(a, a) for a in how]])
    err = capsys.readouterr().err
    for name, path in files.items():
        said = said.replace(name, path)
    assert e.value.code == 2 and said in err and "Nothing answered" not in err, err


def run_json(stub, tmp_path, *how) -> dict:
    out = tmp_path / "run.json"
    assert main(["--url", stub, "--no-metrics", "--json", str(out), *how]) == 0
    return json.loads(out.read_text())


def test_chat_with_synthetic_text_records_both_counts(stub, tmp_path, capsys, sizer):
    run = run_json(stub, tmp_path, "--chat", "--concurrency", "2", "--num-requests", "4", "--input-len", "40",
                   "--output-len", "3", "--shared-prefix", "10", "--prefix-groups", "2")
    assert run["inputs"]["tokenizer"].startswith("SmolLM2") and len(run["inputs"]["tokens"]) == 4
    for row, request in zip(run["inputs"]["tokens"], run["requests"]):
        assert abs(row["client_prompt"] - 50) <= 1 and row["asked_output"] == row["server_output"] == 3
        assert row["server_prompt"] == request["input_tokens"] > 0  # the stub counts words
    assert "the client's count" in capsys.readouterr().out


def test_chat_conversations_of_synthetic_text(stub, tmp_path, capsys):
    run = run_json(stub, tmp_path, "--chat", "--concurrency", "2", "--num-requests", "2", "--turns", "3",
                   "--input-len", "12", "--output-len", "2")
    assert [r["turn"] for r in run["requests"]] == [1, 2, 3] * 2 and "tokens" not in run["inputs"]
    said = [r["input_tokens"] for r in run["requests"]]  # the stub counts every message's words: they grow
    assert said[0] < said[1] < said[2] and said[3] < said[4] < said[5]
    assert "turn 3: 2 completed" in capsys.readouterr().out


def test_each_dataset_runs_end_to_end(stub, tmp_path):
    data = tmp_path / "sharegpt.json"
    data.write_text(json.dumps([sharegpt(f"question {i} " * 3, "an answer of some words") for i in range(3)]))
    run = run_json(stub, tmp_path, "--chat", "--concurrency", "3", "--num-requests", "3", "--dataset", "sharegpt",
                   "--dataset-path", str(data))
    assert [r["asked_output"] for r in run["inputs"]["tokens"]] == [5] * 3  # the answer's tokens, as max_tokens
    assert all(r["output_tokens"] == 5 for r in run["requests"]) and "ShareGPT" in run["inputs"]["source"]
    lines = write(tmp_path / "d.jsonl", [{"prompt": "Hello there", "output_length": 2}, {"input_length": 30}])
    run = run_json(stub, tmp_path, "--concurrency", "2", "--num-requests", "2", "--output-len", "4", "--dataset",
                   "jsonl", "--dataset-path", lines)
    assert [(r["client_prompt"], r["asked_output"]) for r in run["inputs"]["tokens"]] == [(2, 2), (30, 4)]


def test_a_trace_is_sent_at_its_times(stub, tmp_path):
    trace = write(tmp_path / "t.jsonl", [{"timestamp": t, "input_length": 600, "output_length": 2, "hash_ids": [7, 8]}
                                         for t in (0, 200, 600)])
    run = run_json(stub, tmp_path, "--trace", trace, "--trace-speed", "2")
    sent = [r["sent"] - run["requests"][0]["sent"] for r in run["requests"]]
    assert len(sent) == 3 and sent[1] == pytest.approx(0.1, abs=0.03) and sent[2] == pytest.approx(0.3, abs=0.03)
    assert "2x as fast" in run["inputs"]["source"]


def test_a_trace_sent_by_two_workers_keeps_its_times(stub, tmp_path):
    """Each worker sends its share of the trace at the trace's own times, on one clock (bench.scale)."""
    trace = write(tmp_path / "t.jsonl", [{"timestamp": t, "input_length": 40, "output_length": 2}
                                         for t in (0, 100, 200, 300)])
    run = run_json(stub, tmp_path, "--trace", trace, "--workers", "2")
    sent = [r["sent"] - run["requests"][0]["sent"] for r in run["requests"]]
    assert sent == pytest.approx([0.0, 0.1, 0.2, 0.3], abs=0.03) and run["scale"]["workers"] == 2
    assert len(run["inputs"]["tokens"]) == 4


def test_a_shard_records_the_counts_of_its_own_prompts(stub, tmp_path):
    """Shard 1/2 sends prompts 1 and 3 of four; what the JSON says of the inputs is said of those two."""
    import time

    lines = write(tmp_path / "d.jsonl", [{"input_length": n, "output_length": 2} for n in (10, 20, 30, 40)])
    run = run_json(stub, tmp_path, "--concurrency", "2", "--num-requests", "4", "--dataset", "jsonl",
                   "--dataset-path", lines, "--shard", "1/2", "--start-at", f"{time.time() + 3:.3f}")
    assert [r["client_prompt"] for r in run["inputs"]["tokens"]] == [20, 40] and len(run["requests"]) == 2


def test_a_sweep_of_chat_requests_records_its_source_and_tokenizer(stub, tmp_path):
    run = run_json(stub, tmp_path, "--chat", "--sweep", "concurrency", "--sweep-values", "1,2", "--num-requests", "2",
                   "--input-len", "8", "--output-len", "2")
    assert len(run["sweep"]["points"]) == 2 and run["inputs"]["source"].startswith("synthetic text")

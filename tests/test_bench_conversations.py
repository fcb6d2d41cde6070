"""Multi-turn conversations (llmperf.bench.conversations): what each turn sends, read off a mock server, and a
run of them against llmperf.serve, where every turn's prompt holds the whole history."""

import asyncio
import json

import httpx
import pytest

from llmperf.bench import conversations, main, run
from llmperf.bench.conversations import Conversation, converse, stand_in
from tests.served import NAME, running, small_app


def mock(bodies: list, answers=("Hi", " there"), fail_at: int | None = None):
    """A server that records each body and streams `answers` as chunks (usage: 2 completion tokens); the
    `fail_at`-th request (1-based) gets a 400."""
    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        if len(bodies) == fail_at:
            return httpx.Response(400, json={"error": {"message": "too long", "param": "prompt"}})
        chat = request.url.path.endswith("chat/completions")
        chunks = [{"choices": [{"delta": {"content": a}} if chat else {"text": a}]} for a in answers]
        usage = {"prompt_tokens": 9, "completion_tokens": len(answers)}
        events = [json.dumps(c) for c in chunks] + [json.dumps({"choices": [], "usage": usage}), "[DONE]"]
        return httpx.Response(200, text="".join(f"data: {e}\n\n" for e in events))

    return httpx.MockTransport(answer)


def talk(conversation: Conversation, chat: bool, bodies: list, **server) -> list:
    async def go():
        async with httpx.AsyncClient(transport=mock(bodies, **server)) as client:
            return await converse(client, "http://server/v1", "m", conversation, 2, chat)

    return asyncio.run(go())


def test_a_chat_turn_carries_every_earlier_message_and_answer():
    bodies = []
    records = talk(Conversation(["What is 2+2?", "And 3+3?", "Thanks."]), True, bodies)
    assert [r.turn for r in records] == [1, 2, 3] and all(r.ok for r in records)
    assert bodies[2]["messages"] == [
        {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "Thanks."}]


def test_a_token_id_turn_carries_the_history_with_its_answers_held_by_stand_ins():
    bodies = []
    talk(Conversation([[5, 6, 7], [8, 9], [10]]), False, bodies)
    assert [b["prompt"] for b in bodies] == [[5, 6, 7], [5, 6, 7, *stand_in(2), 8, 9],
                                            [5, 6, 7, *stand_in(2), 8, 9, *stand_in(2), 10]]
    assert stand_in(5) == stand_in(5) and all(1000 <= i < 32_000 for i in stand_in(2000))


def test_a_failed_turn_ends_its_conversation():
    bodies = []
    records = talk(Conversation(["a", "b", "c"]), True, bodies, fail_at=2)
    assert len(bodies) == 2 and [r.ok for r in records] == [True, False]
    assert records[1].turn == 2 and "too long" in records[1].error


def test_conversations_are_drawn_from_a_seed_or_taken_from_lines_in_order():
    drawn = conversations.from_ids([[1, 2], [3]], 3, [4, 2], seed=7)
    assert drawn == conversations.from_ids([[1, 2], [3]], 3, [4, 2], seed=7)
    assert [[len(t) for t in c] for c in drawn] == [[2, 4, 4], [1, 2, 2]]
    lines = conversations.from_lines(["a", "b", "c"], 2, 2)
    assert lines == [("a", "b"), ("c", "a")]
    with pytest.raises(ValueError, match="turns >= 1"):
        conversations.from_ids([[1]], 0, [1])


@pytest.fixture(scope="module")
def server(smollm2):
    _, tokenizer = smollm2
    with running(small_app(tokenizer, max_num_seqs=4)) as base:
        yield base


def test_conversations_against_llmperf_serve_grow_their_prompts(server):
    talks = conversations.from_ids([[1000 + i] * 6 for i in range(3)], 3, [4] * 3, seed=0)
    records = asyncio.run(run(f"{server}/v1", NAME, talks, 5, concurrency=2, show_progress=False))
    assert len(records) == 9 and all(r.ok for r in records)
    for c in range(3):  # the server's own count of each turn's prompt: the history, answers included
        turns = records[3 * c: 3 * c + 3]
        assert [r.turn for r in turns] == [1, 2, 3]
        assert [r.input_tokens for r in turns] == [6, 6 + 5 + 4, 6 + 5 + 4 + 5 + 4]


def test_the_command_runs_conversations_and_reads_ttft_by_turn(server, tmp_path, capsys):
    lines = tmp_path / "prompts.txt"
    lines.write_text("Name a planet.\nName a colour.\nName a fruit.\n")
    assert main(["--url", server, "--concurrency", "2", "--num-requests", "2", "--turns", "3", "--chat",
                 "--prompts-file", str(lines), "--output-len", "4", "--no-metrics", "--csv", str(tmp_path / "r.csv")
                 ]) == 0
    said = capsys.readouterr().out
    assert "completed 6, failed 0" in said
    assert all(f"turn {k}: 2 completed, prompts of" in said for k in (1, 2, 3))
    assert [row.split(",")[2] for row in (tmp_path / "r.csv").read_text().splitlines()[1:]] == ["1", "2", "3"] * 2


def test_the_command_refuses_no_turns(capsys):
    with pytest.raises(SystemExit):
        main(["--url", "http://127.0.0.1:9", "--concurrency", "1", "--turns", "0"])
    assert "--turns must be at least 1" in capsys.readouterr().err


def test_the_command_reports_the_servers_prefix_cache_over_a_conversation(server, capsys):
    """Token-id turns against llmperf.serve, its /metrics read: each later turn finds the earlier turn's prompt
    (two full blocks of 16 at least), and the report says how much was found, as vLLM counts it."""
    import re

    assert main(["--url", server, "--concurrency", "1", "--num-requests", "1", "--turns", "3", "--input-len", "32",
                 "--output-len", "4"]) == 0
    said = capsys.readouterr().out
    found = re.search(r"prefix cache: ([\d,]+) of ([\d,]+) prompt tokens looked up were found cached \(([\d.]+) %\)",
                      said)
    assert found, said
    hits, queries = (int(found.group(i).replace(",", "")) for i in (1, 2))
    assert hits >= 2 * 32 and queries >= 32 + 2 * (32 + 4) and float(found.group(3)) == round(100 * hits / queries, 1)
    assert "preemptions: 0" in said

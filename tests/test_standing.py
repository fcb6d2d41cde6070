"""The benchmarks page's table of the package beside its anchors (llmperf.standing): each row from a run's rows
and its pairs or rounds, each verdict reached by some numbers, machines without an anchor left out."""

import pytest

from llmperf import benchresults as br
from llmperf.benchpage import machine_label
from llmperf import standing

ENV = {"device": "cpu", "device_name": "Test CPU", "dtype": "float32", "torch": "0", "threads": 2, "cpu_count": 2}
HERE = machine_label(br.result("decode", ENV, {}, [])["machine"])  # this processor's name, as a result records it


def save(tmp_path, benchmark, results, name="test", **machine):
    data = br.result(benchmark, {**ENV, **machine}, results, ["--json", "x.json"])
    br.save({**data, "date": "2026-12-07T10:00:00+00:00"}, tmp_path / f"{benchmark}-{name}.json")


def decode(pairs=None, fused=20.0, llama=22.0, transformers=40.0):
    rows = [{"variant": v, "model": "smollm2-135m", "ms_per_token": ms}
            for v, ms in (("llmperf plain", 50.0), ("llmperf fused", fused), ("llama.cpp F32", llama),
                          ("transformers", transformers)) if ms]
    return {"rows": rows, **({"fused_over_llama_cpp_pairs": pairs} if pairs else {})}


def serving(rounds):
    rows = [{"policy": p, "concurrency": c, "output_tokens_per_s": t}
            for c in rounds for p, t in (("continuous", 40.0 * c), ("llama-server", 42.0 * c))]
    return {"rows": rows, "continuous_over_llama_server": {str(c): r for c, r in rounds.items()}}


def test_each_figure_stands_beside_its_anchor_with_the_runs_ratio(tmp_path):
    save(tmp_path, "decode", decode(pairs=[0.8, 0.9, 1.1]))
    save(tmp_path, "serving", serving({1: [0.96, 1.0, 1.02], 4: [1.2, 1.3, 1.25]}))
    table = standing.standing(tmp_path)
    assert len(table) == 4 and set(table.index) == {HERE}
    llama, hf, one, four = (table.iloc[i] for i in range(4))
    # The rows' figures beside each other, the pairs' median as the ratio (not the rows' 22/20)
    assert (llama["llmperf"], llama["anchor"], llama["ratio (median)"]) == ("20.00 ms/token", "22.00 ms/token", "0.90")
    assert llama["range"] == "0.80–1.10 (3 pairs)"
    assert llama["verdict"] == "behind, single pairs on both sides of level"
    assert (hf["ratio (median)"], hf["range"], hf["verdict"]) == ("2.00", "—", "ahead of")  # one run's rows: 40/20
    assert one["figure"] == "output tokens/s at 1 client ÷ llama-server's" and one["verdict"] == "level with"
    assert (four["llmperf"], four["anchor"]) == ("160.0 tokens/s", "168.0 tokens/s")
    assert four["range"] == "1.20–1.30 (3 rounds)"
    assert four["verdict"] == "ahead of"
    assert standing.standing_sentence(standing.standing(tmp_path)) == (
        f"Of 4 figures, 3 are level with or ahead of their anchors. Behind: on the {HERE}, "
        "decode tokens/s ÷ llama.cpp F32's (0.90).")


@pytest.mark.parametrize("pairs, said", [
    (None, "Of 2 figures, 2 are level with or ahead of their anchors."),  # no pairs: the rows' 22/20 = 1.10
    ([1.0, 1.02], "Of 2 figures, 2 are level with or ahead of their anchors."),
    ([0.5, 0.6], "Of 2 figures, 1 is level with or ahead of its anchor. Behind: on the {HERE}, decode tokens/s ÷ "
                 "llama.cpp F32's (0.55)."),
])
def test_the_sentence_names_what_is_behind_and_nothing_else(tmp_path, pairs, said):
    save(tmp_path, "decode", decode(pairs=pairs))
    assert said.format(HERE=HERE) in standing.standing_sentence(standing.standing(tmp_path))


def test_a_run_without_an_anchor_gives_no_row_and_no_run_says_so(tmp_path):
    assert standing.standing(tmp_path).empty
    assert standing.standing_sentence(standing.standing(tmp_path)) == ("No committed run measured the package "
                                                                        "beside an anchor.")
    save(tmp_path, "decode", decode(llama=None, transformers=None))  # the fused model alone
    save(tmp_path, "serving", {"rows": [{"policy": "continuous", "concurrency": 1, "output_tokens_per_s": 9.0}]})
    save(tmp_path, "decode", {"rows": [{"variant": "CUDA Graph", "model": "llama-3-8b", "ms_per_token": 7.0}]},
         name="gpu", device="cuda", device_name="Test GPU")
    assert standing.standing(tmp_path).empty


def test_the_committed_results_give_a_table_with_a_row_per_anchor():
    table = standing.standing()
    assert not table.empty and set(table["verdict"].str.split(",").str[0]) <= {"ahead of", "level with", "behind"}
    assert standing.standing_sentence(table).startswith(f"Of {len(table)} figures, ")

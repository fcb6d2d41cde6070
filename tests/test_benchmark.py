"""The benchmarks run end to end and write the tables they print as result files (their times are not
asserted)."""

import importlib.util
import json
import argparse
import pathlib
import sys

import pytest
import torch

from llmperf import benchresults

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_script(name: str):
    """A benchmark script from benchmarks/ as a module (they are scripts, not part of the package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def written(path: pathlib.Path, benchmark: str) -> dict:
    """The result file a script wrote: valid, of `benchmark`, on this machine, with the script's command."""
    data = benchresults.load(path)
    assert data["benchmark"] == benchmark and data["command"][0] == f"benchmarks/{benchmark}.py"
    assert "--json" in data["command"] and data["machine"]["cpu_count"] and data["machine"]["device"] == "cpu"
    return data["results"]


def load_benchmark():
    return load_script("decode")


def test_decode_benchmark_writes_its_table(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LLAMA_BENCH", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no llama-bench: the table has no llama.cpp row, and says why
    bench = load_benchmark()
    out = tmp_path / "decode.json"
    assert bench.main(["--device", "cpu", "--dtypes", "float32", "--prompt", "8", "--new-tokens", "4",
                       "--repeat", "1", "--skip-transformers", "--json", str(out)]) == 0
    table = written(out, "decode")
    assert [r["variant"] for r in table["rows"]] == ["llmperf plain", "llmperf fused"]
    for r in table["rows"]:
        assert r["tokens_per_s"] == pytest.approx(1e3 / r["ms_per_token"])
        assert r["achieved_GBps"] * 1e9 == pytest.approx(r["step_bytes"] * r["tokens_per_s"])
        assert r["fraction_of_probe_bw"] == pytest.approx(r["achieved_GBps"] / r["probe_GBps"])
        assert r["probe"] == "read" and r["probe_GBps"] > 0
    out = capsys.readouterr().out
    assert "llmperf fused" in out and "no llama-bench on PATH" in out
    assert "steal: " in out and (0 <= table_steal(out_file=tmp_path / "decode.json") <= 1)


def table_steal(out_file: pathlib.Path) -> float:
    """The steal a benchmark's JSON recorded: 0 where the machine does not report it (not Linux)."""
    return json.loads(out_file.read_text()).get("steal", 0)


def fake_llama_cpp(folder: pathlib.Path, tokens_per_s: float) -> pathlib.Path:
    """Stand-ins for llama.cpp's llama-quantize (writes its output file) and llama-bench (prints a JSON
    result, and records its arguments)."""
    folder.mkdir()
    quantize, bench = folder / "llama-quantize", folder / "llama-bench"
    quantize.write_text('#!/bin/sh\necho F32 > "$3"\n')
    bench.write_text(f'#!/bin/sh\necho "$@" > {folder}/args\necho \'[{{"avg_ts": {tokens_per_s}}}]\'\n')
    for script in (quantize, bench):
        script.chmod(0o755)
    return bench


def test_decode_benchmark_runs_llama_cpp_in_the_same_run(tmp_path, capsys, monkeypatch):
    bench_module = load_benchmark()
    fake = fake_llama_cpp(tmp_path / "llama.cpp", tokens_per_s=50.0)
    monkeypatch.setenv("LLAMA_BENCH", str(fake))
    monkeypatch.setattr(bench_module, "LLAMA_CPP_DIR", tmp_path / "converted")
    out = tmp_path / "decode.json"
    assert bench_module.main(["--device", "cpu", "--dtypes", "float32", "--prompt", "8", "--new-tokens", "4",
                              "--repeat", "1", "--pairs", "3", "--skip-transformers", "--json", str(out)]) == 0
    table = written(out, "decode")
    rows = {r["variant"]: r for r in table["rows"]}
    assert rows["llama.cpp F32"]["tokens_per_s"] == pytest.approx(50.0)
    pairs = table["fused_over_llama_cpp_pairs"]  # each: the fused model's tokens/s over llama.cpp's 50
    assert len(pairs) == 3 and all(r > 0 for r in pairs)
    assert rows["llama.cpp F32"]["step_bytes"] == rows["llmperf fused"]["step_bytes"]  # the same step's bytes
    args = (tmp_path / "llama.cpp" / "args").read_text().split()
    given = dict(zip(args[::2], args[1::2]))
    assert (given["-d"], given["-n"], given["-t"], given["-p"]) == ("8", "4", str(torch.get_num_threads()), "0")
    assert given["-m"].endswith("SmolLM2-135M-Instruct.F32.gguf")
    printed = capsys.readouterr().out
    assert "x llama.cpp F32's tokens/s, in the rows above" in printed
    assert "in 3 back-to-back pairs, llmperf fused made" in printed


def test_decode_benchmark_refuses_a_wrong_llama_bench(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LLAMA_BENCH", str(tmp_path / "nowhere" / "llama-bench"))
    with pytest.raises(SystemExit):
        load_benchmark().main(["--device", "cpu", "--dtypes", "float32"])
    out = capsys.readouterr()
    assert "is not an executable file" in out.err and out.out == ""  # before anything was measured


@pytest.mark.parametrize("argv", [["--dtypes", "float8"], ["--big", "llama-9b"], ["--new-tokens", "1"], ["--pairs", "-1"],
                                  ["--device", "cpu", "--skip-smollm2"], ["--device", "tpu"]])
def test_decode_benchmark_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit):
        load_benchmark().main(argv)
    out = capsys.readouterr()
    assert "error:" in out.err and out.out == ""  # refused before anything was measured or printed


def test_big_model_rows_run_eagerly_anywhere():
    """The GPU-only rows, on a CPU with the tiny preset: the eager row (CUDA Graph and compile left out)."""
    import argparse

    args = argparse.Namespace(big="tiny", prompt=4, new_tokens=4, skip_compile=True)
    rows = load_benchmark().big_rows(torch.device("cpu"), args)
    assert [r["variant"] for r in rows] == ["eager"]
    assert rows[0]["probe"] == "copy" and rows[0]["dtype"] == "bfloat16" and rows[0]["ms_per_token"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA Graphs and the GPU rows need an NVIDIA GPU; this machine has none")
def test_big_model_rows_on_cuda():
    import argparse

    args = argparse.Namespace(big="tiny", prompt=4, new_tokens=4, skip_compile=False)
    rows = load_benchmark().big_rows(torch.device("cuda"), args)
    assert [r["variant"] for r in rows] == ["eager", "CUDA Graph", "fused, CUDA Graph", "torch.compile"]
    assert all(r["ms_per_token"] > 0 and r["probe"] == "copy" for r in rows)


def load_anatomy():
    return load_script("step_anatomy")


def test_step_anatomy_writes_its_table(tmp_path):
    out = tmp_path / "anatomy.json"
    assert load_anatomy().main(["--device", "cpu", "--model", "tiny", "--context", "8", "--repeat", "2",
                                "--json", str(out)]) == 0
    result = written(out, "step_anatomy")
    assert [r["variant"] for r in result["steps"]] == ["eager"]
    assert {r["kind"] for r in result["rows"]} >= {"projections", "lm_head", "other"}
    assert result["ops"] > 0 and result["model"] == "tiny"
    assert result["op_overhead_us"] > 0


@pytest.mark.parametrize("argv", [["--dtype", "float8"], ["--model", "llama-9b"], ["--context", "-1"],
                                  ["--device", "tpu"], ["--model", "tiny", "--context", "100000"]])
def test_step_anatomy_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit):
        load_anatomy().main(argv)
    out = capsys.readouterr()
    assert "error:" in out.err and out.out == ""


def load_serving():
    return load_script("serving")


def test_serving_benchmark_writes_its_table(tmp_path, capsys):
    out = tmp_path / "serving.json"
    assert load_serving().main(["--concurrency", "1,2", "--min-requests", "2", "--input-len", "4",
                                "--output-len", "3", "--device", "cpu", "--json", str(out)]) == 0
    rows = written(out, "serving")["rows"]
    assert [(r["policy"], r["concurrency"]) for r in rows] == [("continuous", 1), ("continuous", 2),
                                                               ("static", 1), ("static", 2)]
    assert all(r["failed"] == 0 and r["requests"] >= 2 and r["output_tokens_per_s"] > 0 for r in rows)
    assert all(r["longest_gap_ms"] >= r["tpot_p50_ms"] > 0 for r in rows)  # a stall is at least a usual gap
    assert "tokens/s" in capsys.readouterr().out


def test_the_longest_gap_is_the_longest_wait_between_two_tokens():
    from llmperf.metrics import RequestRecord

    serving = load_serving()
    records = [RequestRecord(0.0, [0.1, 0.2, 0.5]), RequestRecord(0.0, [0.3]), RequestRecord(0.0, error="HTTP 500")]
    assert serving.longest_gap(records) == pytest.approx(0.3)
    assert serving.longest_gap(records[1:]) == 0.0


def test_the_servers_take_turns_and_each_round_is_paired(monkeypatch):
    from contextlib import contextmanager

    serving, order = load_serving(), []

    @contextmanager
    def running(command, port, what):
        yield f"http://{command[0]}/v1"

    def measure(url, name, c, args, round_):
        order.append((url.split("/")[2], c, round_))
        speed = {"continuous": 10.0 + round_, "llama-server": 5.0}[url.split("/")[2]]  # drifts, one server only
        return {"concurrency": c, "output_tokens_per_s": speed}

    class Models:
        def json(self):
            return {"data": [{"id": "m"}]}

    monkeypatch.setattr(serving, "running", running)
    monkeypatch.setattr(serving, "measure", measure)
    monkeypatch.setattr(serving.httpx, "get", lambda *a, **k: Models())
    commands = {name: ([name], 0, name) for name in ("continuous", "llama-server")}
    rows, ratios = serving.compare(commands, [1, 4], argparse.Namespace(rounds=3))
    assert order[:6] == [("continuous", 1, 0), ("llama-server", 1, 0), ("llama-server", 1, 1),
                         ("continuous", 1, 1), ("continuous", 1, 2), ("llama-server", 1, 2)]  # turns, reversed
    assert ratios == {1: [2.0, 2.2, 2.4], 4: [2.0, 2.2, 2.4]}  # each round's own pair
    assert [(r["policy"], r["concurrency"], r["output_tokens_per_s"]) for r in rows] == [
        ("continuous", 1, 11.0), ("continuous", 4, 11.0), ("llama-server", 1, 5.0), ("llama-server", 4, 5.0)]


STUB_SERVER = """
import http.server, sys
print("Note: 3 of this host's choices were measured while other work held up to 1.00 of its cores.", flush=True)
print("a line of its log", file=sys.stderr, flush=True)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def test_a_server_started_for_the_benchmark_has_its_notes_printed(capsys):
    serving = load_serving()
    port = serving.free_port()
    with serving.running([sys.executable, "-c", STUB_SERVER, str(port)], port, "stub") as url:
        assert url == f"http://127.0.0.1:{port}/v1"
    printed = capsys.readouterr().out
    assert "stub: Note: 3 of this host's choices were measured" in printed and "a line of its log" not in printed


@pytest.mark.parametrize("argv", [["--concurrency", "1,x"], ["--concurrency", "0"], ["--policies", "fifo"],
                                  ["--output-len", "1"], ["--rounds", "0"]])
def test_serving_benchmark_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit):
        load_serving().main(argv)
    assert "error:" in capsys.readouterr().err


def test_serving_benchmark_refuses_a_wrong_llama_server_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LLAMA_SERVER", str(tmp_path / "no-such-llama-server"))
    with pytest.raises(SystemExit) as exit:
        load_serving().main(["--concurrency", "1"])
    assert exit.value.code == 2 and "is not an executable file" in capsys.readouterr().err


def test_chunked_prefill_benchmark_writes_its_table(tmp_path, capsys):
    out = tmp_path / "chunked.json"
    assert load_script("chunked_prefill").main(["--long-prompt", "12", "--chunks", "16,4", "--rounds", "1",
                                                "--decoding", "1", "--device", "cpu", "--json", str(out)]) == 0
    rows = written(out, "chunked_prefill")["rows"]
    assert [(r["prefill_chunk"], r["pieces"]) for r in rows] == [(16, 1), (4, 3)]
    assert all(r["longest gap (ms)"] >= r["median gap (ms)"] > 0 and r["long TTFT (ms)"] > 0 for r in rows)
    assert "then a 12-token prompt arrives" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--chunks", "512,x"], ["--chunks", "0"], ["--rounds", "0"],
                                  ["--long-prompt", "9000"], ["--device", "tpu"]])
def test_chunked_prefill_benchmark_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit):
        load_script("chunked_prefill").main(argv)
    out = capsys.readouterr()
    assert "error:" in out.err and out.out == ""

"""The benchmark result files (llmperf.benchresults) and the benchmarks page built from them (llmperf.benchpage).

The scripts' own --json runs are in test_benchmark.py; here: the format round-trips, a malformed file is refused
by name, every committed file is valid, and each sentence the page can write is reached by some numbers."""

import json
import subprocess
import sys
import time

import pytest

from llmperf import benchpage as page
from llmperf import benchresults as br

ENV = {"device": "cpu", "device_name": "Test CPU", "dtype": "float32", "torch": "0", "threads": 2, "cpu_count": 2}


def a_result(benchmark="decode", date="2026-12-03T10:00:00+00:00", **machine):
    data = br.result(benchmark, {**ENV, **machine}, {"rows": [{"variant": "llmperf plain", "ms_per_token": 30.0}]},
                     ["--json", "x.json"])
    return {**data, "date": date}


def test_a_result_round_trips_with_its_machine_date_commit_and_command(tmp_path):
    data = a_result()
    assert br.load(br.save(data, tmp_path / "sub" / "r.json")) == data
    assert data["format"] == br.FORMAT and data["version"] == br.VERSION
    assert data["command"] == ["benchmarks/decode.py", "--json", "x.json"]
    assert "dtype" not in data["machine"] and data["machine"]["cpu_count"] == 2
    assert set(data["machine"]["cpu_flags"]) <= set(br.CPU_FLAGS) and data["machine"]["cpu_name"]


def test_the_commit_is_the_checkouts_short_hash_or_none(tmp_path):
    here = br.commit()
    assert here is None or (4 <= len(here) <= 12 and all(c in "0123456789abcdef" for c in here))
    assert br.commit(tmp_path) is None  # not a git checkout


def corrupt(data, **changes):
    return {**data, **changes}


@pytest.mark.parametrize("change, said", [
    (dict(format="llmperf-reference"), "not an llmperf benchmark result"),
    (dict(version=0), '"version" must be a whole number'),
    (dict(version=br.VERSION + 1), "newer than this llmperf reads"),
    (dict(benchmark="prefill"), '"benchmark" must be one of'),
    (dict(machine={"device": "cpu"}), '"machine" must be an object'),
    (dict(date="yesterday"), '"date" must be an ISO 8601 date'),
    (dict(commit=7), '"commit" must be a commit hash or null'),
    (dict(command="decode.py --json"), '"command" must be a list of strings'),
    (dict(results={"rows": []}), 'non-empty list of "rows"'),
    (dict(results={"rows": [1]}), "must be an object"),
    (dict(transcribed={"from": "page"}), '"transcribed" must be null'),
])
def test_a_malformed_file_is_refused_naming_it(tmp_path, change, said):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(corrupt(a_result(), **change)))
    with pytest.raises(br.BenchmarkFileError, match=said) as err:
        br.load(path)
    assert str(path) in str(err.value)
    with pytest.raises(br.BenchmarkFileError):
        br.save(corrupt(a_result(), **change), tmp_path / "out.json")  # nor is it written


@pytest.mark.parametrize("text, said", [("{", "not valid JSON"), (None, "cannot be read"), ("[]", "not an llmperf")])
def test_a_file_that_is_not_json_or_missing_is_refused_naming_it(tmp_path, text, said):
    path = tmp_path / "r.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(br.BenchmarkFileError, match=said) as err:
        br.load(path)
    assert str(path) in str(err.value)


def test_every_committed_result_is_valid_and_says_where_it_came_from():
    files = br.committed()
    assert files, "benchmarks/results/ holds no result"
    for path, data in files:
        assert path.name.startswith(data["benchmark"]), path
        assert data.get("transcribed") or data["commit"], f"{path}: neither a run's commit nor a transcription"
        for benchmark in br.BENCHMARKS:
            page.TABLES[benchmark]  # every benchmark has a table and a sentence
            page.SENTENCES[benchmark]
        page.TABLES[data["benchmark"]](data["results"])
        assert page.SENTENCES[data["benchmark"]](data["results"])


def test_latest_keeps_the_newest_run_per_machine_gpus_first():
    old, new = a_result(date="2026-12-01"), a_result(date="2026-12-03T09:00:00+00:00")
    other = a_result(date="2026-12-02", cpu_count=64)
    gpu = a_result(date="2026-11-01", device="cuda:0", device_name="NVIDIA H200")
    files = [("old", old), ("new", new), ("other", other), ("gpu", gpu), ("x", a_result("serving"))]
    assert [p for p, _ in br.latest(files, "decode")] == ["gpu", "new", "other"]


def test_the_reader_and_the_page_import_no_torch():
    code = "import sys, llmperf.benchpage; assert 'torch' not in sys.modules, 'torch imported'"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


# --- the page's words, each branch ----------------------------------------------------------------------------

@pytest.mark.parametrize("flags, said", [(["avx2", "amx_tile"], "AMX"), (["avx2", "avx512f"], "AVX-512"),
                                         (["avx2"], "AVX2"), (["asimd"], "NEON"), ([], ""), (None, "")])
def test_features(flags, said):
    assert page.features(flags) == said


def test_machine_labels_and_provenance():
    cpu = {"device": "cpu", "device_name": "X", "cpu_name": "AMD EPYC", "cpu_count": 2, "cpu_flags": ["avx512f"]}
    assert page.machine_label(cpu) == "AMD EPYC, 2 cores, AVX-512"
    assert page.machine_label({"device": "cpu", "device_name": "M1"}) == "M1"
    assert page.machine_label({"device": "cuda", "device_name": "NVIDIA H200"}) == "NVIDIA H200"
    assert page.provenance({"transcribed": {"from": "README.md", "commit": "abc"}}) == (
        "transcribed from README.md at commit abc")
    assert page.provenance({"commit": "abc"}) == "written by the run at commit abc"
    assert page.provenance({"commit": None}) == "written by the run"


def test_numbers_in_cells():
    assert page.number(None) == page.number("x") == page.number(True) == page.NONE
    assert (page.number(4252.4), page.number(34.12), page.number(0.5), page.number(7.02, 3)) == (
        "4,252", "34.1", "0.50", "7.020")


def test_ratios_come_from_each_round_or_from_a_summary():
    assert page.summary({"p": [1.0, 3.0, 2.0]}, "p") == {"pairs": 3, "median": 2.0, "min": 1.0, "max": 3.0}
    assert page.summary({"p_summary": {"median": 1}}, "p") == {"median": 1}
    assert page.summary({"p": []}, "p") is None
    listed = {"continuous_over_llama_server": {"4": [1.0, 1.2], "1": []},
              "continuous_over_llama_server_summary": {"8": {"median": 0.5}}}
    assert {c: s["median"] for c, s in page.ratios(listed).items()} == {4: 1.1, 8: 0.5}


def decode(*rows, **extra):
    return {"rows": [{"variant": v, "ms_per_token": ms, **more} for v, ms, more in rows], **extra}


@pytest.mark.parametrize("pairs, said", [
    ([1.2, 1.1, 1.3], "ahead of llama.cpp there."), ([0.98, 1.0, 1.02], "level with llama.cpp there, though"),
    ([0.7, 0.8, 0.75], "behind llama.cpp there."), ([0.9, 0.8, 1.1], "behind llama.cpp there, though single pairs")])
def test_decode_against_llama_cpp(pairs, said):
    assert said in page.decode_sentence(decode(("llmperf fused", 20.0, {}), fused_over_llama_cpp_pairs=pairs))


def test_decode_sentences_for_the_fused_step_the_graph_and_the_roof():
    text = page.decode_sentence(decode(("llmperf plain", 40.0, {"fraction_of_probe_bw": 0.3}),
                                       ("llmperf fused", 20.0, {"fraction_of_probe_bw": 0.85})))
    assert "The fused step was 2.0 times faster than the plain one." in text
    assert "at 85 % of the probed bandwidth: near the memory roof." in text
    text = page.decode_sentence(decode(("eager", 25.0, {"fraction_of_probe_bw": 0.1}),
                                       ("CUDA Graph", 10.0, {"fraction_of_probe_bw": 0.5})))
    assert "Replayed from a CUDA Graph the step was 2.5 times faster than eager." in text
    assert "50 % of the probed bandwidth: below the memory roof" in text
    assert page.decode_sentence(decode(("llmperf plain", 40.0, {}))) == (
        "These rows hold nothing to compare with one another.")
    layouts = {"kernel: wqkv 128x64": {"chosen": "BLAS", "step seconds": {"BLAS": 1e-4, "compiled": 2e-4}},
               "kernel: wqkv 960x576": {"chosen": "compiled", "step seconds": {"BLAS": 0.021, "compiled": 0.019}},
               "wqkv 960x576": {"chosen": "input-major", "step seconds": {"input-major": 0.02}}}
    text = page.decode_sentence(decode(("llmperf fused", 20.0, {}), numpy_step_layouts=layouts))
    assert "products ran in the loop Numba compiles (`llmperf.fast.kernel`), measured in whole steps on this " \
           "machine: 19.00 ms a step compiled against 21.00 ms in the BLAS." in text
    layouts["kernel: wqkv 960x576"]["step seconds"]["compiled"] = 0.022
    assert "products ran in NumPy's BLAS" in page.decode_sentence(decode(numpy_step_layouts=layouts))
    whole = {"batch-1 step: wqkv 960x576": {"chosen": "compiled", "step seconds": {"BLAS": 0.021, "compiled": 0.018}}}
    assert page.kernel_choice({"numpy_step_layouts": whole}) == (
        "The fused step ran in the loops Numba compiles (`llmperf.fast.compiled_step`), measured in whole steps on "
        "this machine: 18.00 ms a step compiled against 21.00 ms in the BLAS.")
    whole["kernel's rows at once: wqkv 960x576"] = {"chosen": "1 row", "step seconds": {"4 rows": 0.02, "1 row": 0.018}}
    assert page.kernel_choice({"numpy_step_layouts": whole}).endswith(
        "in the BLAS. Its products took 1 weight row per pass, measured the same way: 20.00 ms with 4 rows, "
        "18.00 ms with 1 row.")
    whole["batch-1 step: wqkv 960x576"]["step seconds"]["compiled"] = 0.022
    assert page.kernel_choice({"numpy_step_layouts": whole}).endswith(  # the rows: only where the kernel ran
        "against 21.00 ms in the BLAS.")
    assert page.kernel_choice({"numpy_step_layouts": whole}).startswith("The fused step ran in NumPy's BLAS")
    assert page.kernel_choice({"numpy_step_layouts": {"wqkv 960x576": {}}}) is None
    table = page.decode_table(decode(("llmperf fused", 20.0, {})))
    assert list(table.columns) == ["ms/token", "tokens/s"] and table["tokens/s"].iloc[0] == "50.0"


def anatomy(products=None, probe=None, ops=None, overhead=None, eager=None, kernels=None):
    steps = [{"variant": "eager", "ms": eager, "read_GBps": probe}] if eager else []
    return {"rows": [{"kind": "projections", "GBps": products, "ms": 1.0}], "steps": steps, "ops": ops,
            "op_overhead_us": overhead, "kernels": kernels, "read_GBps": None if eager else probe}


def test_anatomy_sentences():
    assert page.anatomy_sentence(anatomy(kernels=1418)) == "One step launched 1,418 kernels."
    assert page.anatomy_sentence(anatomy(products=90, probe=100)).endswith("near the memory roof.")
    assert page.anatomy_sentence(anatomy(products=50, probe=100, eager=2.0)).endswith("below the memory roof.")
    assert "most of the eager step's 2.000 ms" in page.anatomy_sentence(anatomy(ops=1000, overhead=2, eager=2.0))
    assert "under half the eager step's" in page.anatomy_sentence(anatomy(ops=100, overhead=2, eager=2.0))
    assert page.anatomy_sentence(anatomy()) == "This run kept no count or rate to read a verdict from."
    assert page.steps_table(anatomy()) is None
    assert list(page.steps_table(anatomy(eager=2.0, probe=10)).index) == ["eager"]
    assert list(page.anatomy_table(anatomy(products=5)).index) == ["projections"]


def serving(rows, **extra):
    return {"rows": [{"policy": p, "concurrency": c, "output_tokens_per_s": t, **more} for p, c, t, more in rows],
            **extra}


@pytest.mark.parametrize("ratio, said", [(1.2, "ahead of it"), (1.0, "level with it"), (0.8, "behind it")])
def test_serving_against_llama_server(ratio, said):
    text = page.serving_sentence(serving([("continuous", 1, 10.0, {})],
                                         continuous_over_llama_server={"1": [ratio]}))
    assert text == f"At 1 client llmperf.serve made {ratio:.2f} times llama-server's output tokens/s ({said})."
    two = page.serving_sentence(serving([], continuous_over_llama_server_summary={
        "1": {"median": ratio}, "4": {"median": 1.0}}) | {"rows": [{"policy": "x", "concurrency": 1}]})
    assert "; at 4 clients, 1.00 times (level with it)." in two


@pytest.mark.parametrize("last, said", [(30.0, "grew 3.0 times"), (10.2, "stayed about the same"),
                                        (5.0, "fell to 0.50 times")])
def test_serving_growth_with_clients(last, said):
    text = page.serving_sentence(serving([("continuous", 1, 10.0, {}), ("continuous", 8, last, {})]))
    assert text == f"From 1 to 8 clients continuous batching's output tokens/s {said}."


def test_serving_static_against_continuous_and_nothing_to_compare():
    text = page.serving_sentence(serving([("continuous", 1, 10.0, {}), ("continuous", 4, 40.0, {"ttft_p99_ms": 100}),
                                          ("static", 4, 20.0, {"ttft_p99_ms": 550})]))
    assert "At 4 clients static batching's p99 TTFT was 5.5 times continuous batching's, for 0.50 times" in text
    assert page.serving_sentence(serving([("static", 1, 10.0, {})])) == (
        "One server at one concurrency: nothing to compare.")
    table = page.serving_table(serving([("continuous", 1, 10.0, {}), ("llama-server", 1, 9.0, {})],
                                       llama_server_slots=4, continuous_over_llama_server={"1": [1.1]}))
    assert list(table.index) == ["llmperf.serve (continuous)", "llama-server -np 4"]
    assert list(table["× llama-server (median of rounds)"]) == ["1.10", page.NONE]


def chunked(*rows, long_prompt=1024):
    return {"rows": [{"prefill_chunk": c, "pieces": n, "longest gap (ms)": gap, "long TTFT (ms)": ttft}
                     for c, n, gap, ttft in rows], "long_prompt": long_prompt}


def test_chunked_prefill_sentences():
    whole = (4096, 1, 1000.0, 1000.0)
    text = page.chunked_sentence(chunked(whole, (256, 4, 400.0, 1400.0)))
    assert text == ("Prefilled in 4 pieces of 256 positions, the 1,024-token prompt cut the decoding requests' "
                    "longest wait to 40 % of the wait at once, while the long prompt's own TTFT rose 40 %.")
    text = page.chunked_sentence(chunked(whole, (512, 2, 990.0, 1010.0), long_prompt=None))
    assert text == ("Prefilled in 2 pieces of 512 positions, the long prompt left the decoding requests' longest "
                    "wait at 99 % of the wait at once, and the long prompt's own TTFT stayed about the same.")
    nothing = "No two rows prefilled the prompt at once and in pieces, so there is nothing to compare."
    assert page.chunked_sentence(chunked(whole)) == page.chunked_sentence(chunked((256, 4, 1.0, 1.0))) == nothing
    assert list(page.chunked_table(chunked(whole)).index) == ["4,096"]


def test_the_page_shows_each_machines_newest_run_or_says_there_is_none(tmp_path, monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    page.show("serving", where=tmp_path)
    assert [m.data for m in shown] == ["No result of `benchmarks/serving.py` is committed."]
    br.save(a_result(), tmp_path / "decode-test.json")
    (heading, tables, sentence), = page.runs("decode", tmp_path)
    assert ", 2 cores" in heading and "2026-12-03 (written by the run" in heading and len(tables) == 1 and sentence
    shown.clear()
    page.show("decode", where=tmp_path)
    assert len(shown) == 3 and shown[0].data == f"**{heading}**"
    assert list(page.overview(tmp_path)["file"]) == ["benchmarks/results/decode-test.json"]


def test_a_runs_steal_is_kept_and_shown_where_the_machine_reports_it(tmp_path):
    br.save({**a_result(), "steal": 0.236}, tmp_path / "decode-stolen.json")
    (heading, _, _), = page.runs("decode", tmp_path)
    assert heading.endswith("; 23.6% of the CPUs' time stolen by the hypervisor during the run")
    assert "steal" not in a_result()  # none recorded: none said (the page's older runs)
    assert br.steal_said(0.01) == "1.0% of the CPUs' time stolen by the hypervisor during the run"  # printed too
    assert "no steal reported here" in br.steal_said(None)


@pytest.mark.parametrize("lines, want", [
    (["cpu  100 0 50 800 10 0 0 40 0 0", "cpu  200 0 100 1600 20 0 0 80 0 0"], 40 / 1000),
    (["cpu  100 0 50 800 10 0 0", "cpu  200 0 100 1600 20 0 0"], 0.0),  # a kernel without the steal column
    (["cpu  100 0 50 800 10 0 0 40 0 0", "cpu  100 0 50 800 10 0 0 40 0 0"], None),  # no tick went by
])
def test_steal_is_the_share_of_the_ticks_in_between(lines, want, monkeypatch):
    import builtins
    import io

    from llmperf import host

    reads, real_open = iter(lines), builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: io.StringIO(next(reads) + "\n")
                        if path == "/proc/stat" else real_open(path, *a, **k))
    with host.Steal() as steal:
        assert steal.share is None  # not until the block ends
    assert steal.share == (pytest.approx(want) if want is not None else None)


def test_steal_is_none_where_there_is_no_proc_stat(monkeypatch):
    from llmperf import host

    monkeypatch.setattr(host, "cpu_times", lambda: None)
    with host.Steal() as steal:
        pass
    assert steal.share is None


def test_the_page_notebook_is_committed_bare_hidden_narrow_and_shows_every_benchmark():
    notebook = json.loads((br.ROOT / "book" / "benchmarks.ipynb").read_text(encoding="utf-8"))
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    source = "".join("".join(c["source"]) for c in cells)
    assert all(not c["outputs"] and c["execution_count"] is None for c in cells)  # committed without outputs
    assert all({"hide-input", "remove-input"} & set(c["metadata"].get("tags", ())) for c in cells)
    assert all(len(line) <= 80 for c in cells for line in "".join(c["source"]).splitlines())
    assert all(f'benchpage.show("{name}")' in source for name in br.BENCHMARKS)


# --- the client's ceiling (benchmarks/client_ceiling.py) -------------------------------------------------------

def ceiling_rows(*ceilings):
    return {"error_limit_ms": 5.0, "rows": [
        {"workers": w, "ceiling_rate": c, "ceiling_rate_min": c and 0.9 * c, "ceiling_rate_max": c and 1.1 * c,
         "chunks_per_s": c and 16 * c, "ttft_error_mean_ms": c and 2.5} for w, c in enumerate(ceilings, 1)]}


@pytest.mark.parametrize("ceilings, said", [
    ((80.0, 130.0), "with 2 worker processes the ceiling rose 1.62 times, to 130 requests/s."),
    ((80.0, 82.0), "the ceiling stayed about the same (82 requests/s), though single climbs overlapped (72 to 88 "
                   "requests/s against 74 to 90): the stub and the workers share the cores."),
    ((80.0, 60.0), "the ceiling fell to 0.75 times that, 60 requests/s."),
    ((80.0,), "up to 80 requests/s (1,280 chunks/s)."),
    ((None, None), "No load passed"),
])
def test_the_ceilings_sentence(ceilings, said):
    assert said in page.SENTENCES["client_ceiling"](ceiling_rows(*ceilings))


def test_the_ceilings_table_has_a_row_per_worker_count():
    table = page.TABLES["client_ceiling"](ceiling_rows(80.0, None))
    assert list(table.index) == [1, 2]
    assert list(table.loc[1]) == ["80", "72 to 88", "1,280", "2.50"] and table.loc[2, "chunks/s"] == "—"


def spin(seconds: float) -> None:
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        pass


def test_other_work_counts_the_cores_another_program_holds():
    from llmperf import host

    if host.busy_seconds(host.my_cpus()) is None or len(host.my_cpus()) < 2:
        pytest.skip("needs Linux's /proc/stat and two CPUs: one for this test, one for the other program")
    with host.OtherWork() as quiet:
        spin(0.5)
    if quiet.cores > 0.5:
        pytest.skip(f"other work already holds {quiet.cores:.2f} cores here")
    other = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        with host.OtherWork() as loaded:
            spin(0.5)
    finally:
        other.kill()
        other.wait()
    assert loaded.cores > quiet.cores + 0.5  # about one core more


def test_other_work_is_none_where_there_is_no_proc_stat(monkeypatch):
    from llmperf import host

    monkeypatch.setattr(host, "busy_seconds", lambda cpus: None)
    with host.OtherWork() as others:
        pass
    assert others.cores is None

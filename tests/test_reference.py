"""Reference runs: the file's schema, a tiny run's round trip and merge, and every chapter's rendering of a
reference beside this machine (figures with a reference series, tables with a reference column), without a GPU."""

import contextlib
import copy
import json
import pickle
import subprocess
import sys

import matplotlib.pyplot as plt
import pytest
import torch

from llmperf.plots import caching as caching_figs, chain as chain_figs, intensity as intensity_figs
from llmperf.plots import prefill as prefill_figs, serving as serving_figs
from llmperf.reference import runner
from llmperf.reference.__main__ import main, parse_cut
from llmperf.references import ReferenceFileError, ReferenceMergeError, fileformat, load, merge, save
from llmperf.references import compare, results, sentences

GPU_LABEL = "reference run: NVIDIA H200, 2026-12-02"


@contextlib.contextmanager
def threads_kept():
    """make_setup picks PyTorch's thread count on a CPU, as a chapter's setup does; the tests after it keep theirs."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)


JUPYTER = ("myst_nb", "IPython", "ipykernel", "jupyter_client", "nbformat", "nbclient", "jupyter_book")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """Every chapter run once on the tiny preset by the command line, in a fresh Python that cannot import
    Jupyter (a GPU machine has none): the chapters' live records, as `runner.RUNS` returned them to it, and the
    reference it wrote, renamed "Test CPU"."""
    where = tmp_path_factory.mktemp("tiny")
    code = (f"import pickle, sys; sys.modules.update(dict.fromkeys({JUPYTER!r}))\n"  # importing one raises ImportError
            "from llmperf.reference import runner\n"
            "from llmperf.reference.__main__ import main\n"
            "live = {}\n"
            "for name, run in list(runner.RUNS.items()):\n"  # keep what each chapter's run returns
            "    runner.RUNS[name] = lambda s, name=name, run=run: live.setdefault(name, run(s))\n"
            f"code = main(['--preset', 'tiny', '--device', 'cpu', '--out', {str(where / 'r.json')!r}])\n"
            f"with open({str(where / 'live.pickle')!r}, 'wb') as f:\n"
            "    pickle.dump(live, f)\n"
            "sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    ref = load(where / "r.json")
    ref["device"]["name"] = "Test CPU"
    return pickle.loads((where / "live.pickle").read_bytes()), ref


def gpu_copy(ref):
    """The tiny reference dressed as an H200's, with graph and compile times (the GPU branches)."""
    gpu = copy.deepcopy(ref)
    gpu["device"] = {"type": "cuda", "name": "NVIDIA H200"}
    for entry in gpu["chapters"].values():
        entry["date"] = "2026-12-02T10:00:00+00:00"
    r = gpu["chapters"]["anatomy"]["results"]
    r.update(kernels_per_step=1418, eager_ms=r["plain_step_ms"], graph_ms=r["plain_step_ms"] / 3,
             compiled_ms=r["plain_step_ms"] / 4, launch_removed_pct=100 * (1 - 1 / 3))
    return gpu


@pytest.fixture(scope="module")
def folder(tiny_run, tmp_path_factory):
    """A references folder holding the tiny CPU reference and its GPU copy."""
    where = tmp_path_factory.mktemp("references")
    save(tiny_run[1], where / "test-cpu.json")
    save(gpu_copy(tiny_run[1]), where / "test-h200.json")
    return where


# --- the file ------------------------------------------------------------------------------------------------

def test_tiny_reference_round_trips(tiny_run, tmp_path):
    _, ref = tiny_run
    path = save(ref, tmp_path / "r.json")
    assert load(path) == json.loads(json.dumps(ref))
    assert set(ref["chapters"]) == set(fileformat.CHAPTERS)
    for name, entry in ref["chapters"].items():
        assert set(entry["results"]) >= {row.key for row in results.ROWS[name]}, name
        assert entry["environment"]["torch"] == torch.__version__ and entry["weights"] == runner.TINY
    assert {"read_bandwidth", "copy_bandwidth", "matmul_float32", "matmul_bfloat16", "op_overhead"} <= set(
        ref["probes"]["values"])
    assert path.stat().st_size < 200_000  # tens of kB, no weights


@pytest.mark.parametrize("text, words", [
    ("{not json", "not valid JSON"),
    ('{"format": "something else"}', "not an llmperf reference"),
    ('{"format": "llmperf-reference", "version": 99, "device": {"type": "cpu", "name": "x"}, "chapters": {}}',
     "newer than this llmperf"),
    ('{"format": "llmperf-reference", "version": "1", "device": {"type": "cpu", "name": "x"}, "chapters": {}}',
     '"version" must be'),
    ('{"format": "llmperf-reference", "version": 1, "device": "cpu", "chapters": {}}', '"device" must be'),
    ('{"format": "llmperf-reference", "version": 1, "device": {"type": "cpu", "name": "x"}, "chapters": []}',
     '"chapters" must be'),
    ('{"format": "llmperf-reference", "version": 1, "device": {"type": "cpu", "name": "x"}, '
     '"chapters": {"chain": {"date": "2026", "environment": {}, "weights": "w", "records": {}}}}', '"results"'),
    ('{"format": "llmperf-reference", "version": 1, "device": {"type": "cpu", "name": "x"}, "chapters": {}, '
     '"probes": {"date": "2026", "values": {}, "environment": []}}', '"environment" object'),
])
def test_malformed_files_name_themselves(tmp_path, text, words):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ReferenceFileError, match=words) as err:
        load(path)
    assert str(path) in str(err.value)
    with pytest.raises(ReferenceFileError):  # a folder holding it fails the same way
        compare.references("chain", tmp_path)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ReferenceFileError, match="cannot be read"):
        load(tmp_path / "absent.json")


def test_partial_merge_keeps_other_chapters_and_refuses_another_device(tiny_run):
    _, ref = tiny_run
    old = copy.deepcopy(ref)
    new = fileformat.empty("cpu", "Test CPU")
    new["chapters"] = {"chain": dict(ref["chapters"]["chain"], date="2027-01-01T00:00:00+00:00")}
    merged = merge(old, new)
    assert merged["chapters"]["chain"]["date"].startswith("2027") and merged["chapters"]["serving"] == ref[
        "chapters"]["serving"]
    assert merged["probes"] == ref["probes"]  # the partial run brought none
    with pytest.raises(ReferenceMergeError, match="NVIDIA H200"):
        merge(old, gpu_copy(ref), "references/x.json")


def test_command_line_merges_a_partial_run(tiny_run, tmp_path, capsys):
    path = tmp_path / "here.json"
    other = copy.deepcopy(tiny_run[1])
    other["device"]["name"] = runner.device_name(torch.device("cpu"))
    save(other, path)
    with threads_kept():
        assert main(["--out", str(path), "--chapters", "chain", "--preset", "tiny", "--device", "cpu",
                     "--cut", "chain_new_tokens=2,3,5"]) == 0
    ref = load(path)
    assert ref["chapters"]["chain"]["cut"] == {"chain_new_tokens": [2, 3, 5]}
    assert ref["chapters"]["chain"]["results"]["new_tokens"] == [2, 3, 5]
    assert ref["chapters"]["serving"] == other["chapters"]["serving"]
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["--chapters", "chain"], "--out FILE is needed"),
    (["--out", "{bad}", "--cut", "nothing"], "SIZE=VALUE"),
    (["--out", "{bad}"], "not valid JSON"),
    (["--out", "{gpu}"], "One file describes one machine"),
    (["--out", "{new}", "--preset", "tiny", "--cut", "no_such_size=3"], "names no size"),
    (["--out", "{new}", "--cut", "decode_batches=64"], "is a sweep"),
    (["--out", "{new}", "--cut", "serve_requests=0"], "whole number of 1 or more"),
    (["--out", "{new}", "--cut", "prefill_model=gpt-5"], "takes a model preset"),
    (["--out", "{new_txt}"], "a reference is a .json file"),
    (["--out", "{new}", "--device", "cuda"], "CUDA was requested"),
])
def test_command_line_refuses_before_running(tiny_run, tmp_path, capsys, argv, words):
    (tmp_path / "bad.json").write_text("{oops")
    save(gpu_copy(tiny_run[1]), tmp_path / "gpu.json")
    argv = [a.format(bad=tmp_path / "bad.json", gpu=tmp_path / "gpu.json", new=tmp_path / "new.json",
                     new_txt=tmp_path / "new.txt") for a in argv]
    if "--device" not in argv:
        argv += ["--device", "cpu"]
    elif torch.cuda.is_available():
        pytest.skip("this machine has CUDA: asking for it is no error here")
    with threads_kept():
        assert main(argv) == 2
    assert words in capsys.readouterr().err


def test_parse_cut():
    assert parse_cut(["serve_requests=32", "decode_batches=1,8,64", "prefill_model=smollm2-360m"]) == {
        "serve_requests": 32, "decode_batches": (1, 8, 64), "prefill_model": "smollm2-360m"}


# --- each chapter beside the references ---------------------------------------------------------------------

def here_results(live, chapter):
    return results.RESULTS[chapter](**live[chapter])


@pytest.mark.parametrize("chapter", fileformat.CHAPTERS)
def test_each_table_has_a_reference_column(tiny_run, folder, chapter):
    others = compare.Comparison(chapter, where=folder)
    assert [r.gpu for r in others.refs] == [True, False]  # GPUs first
    table = others.table(here_results(tiny_run[0], chapter))
    assert list(table.columns) == ["this machine", GPU_LABEL, others.refs[1].label]
    assert len(table) == len(results.ROWS[chapter]) and compare.NOT_IN not in table.to_numpy()
    text = others.text(here_results(tiny_run[0], chapter))
    assert GPU_LABEL in text and "No GPU reference" not in text


def lines_labelled(fig, words):
    return [line for ax in fig.axes for line in ax.get_lines() if words in str(line.get_label())]


def figures(live, others):
    """Each chapter's figures that draw references, with the references of `others` (a chapter -> Comparison)."""
    return {
        "chain": [chain_figs.latency_line(live["chain"]["line"], others["chain"])],
        "prefill": [prefill_figs.ttft_figure(live["prefill"]["sweep"], others["prefill"])],
        "intensity": [intensity_figs.batch_sweep(live["intensity"]["sweep"], others["intensity"]),
                      intensity_figs.context_sweep(live["intensity"]["by_context"], others["intensity"]),
                      intensity_figs.roofline(live["intensity"]["roofs"], live["intensity"]["sweep"],
                                              others["intensity"])],
        "caching": [caching_figs.step_times(live["caching"]["sweep"], others["caching"])],
        "serving": [serving_figs.exchange_rate(live["serving"]["sweep"], others["serving"])],
    }


def test_each_figure_has_a_reference_series(tiny_run, folder):
    others = {c: compare.Comparison(c, where=folder) for c in fileformat.CHAPTERS}
    for chapter, figs in figures(tiny_run[0], others).items():
        for fig in figs:
            assert lines_labelled(fig, GPU_LABEL), (chapter, fig.axes[0].get_title())
            assert lines_labelled(fig, others[chapter].refs[1].label), chapter
            plt.close(fig)
    roof = figures(tiny_run[0], others)["intensity"][2]
    assert lines_labelled(roof, "probed roof") and lines_labelled(roof, "measured steps")
    plt.close("all")


def test_no_references_draw_nothing_and_say_so(tiny_run, tmp_path):
    others = compare.Comparison("anatomy", where=tmp_path)
    assert others.refs == [] and list(others.table(here_results(tiny_run[0], "anatomy")).columns) == ["this machine"]
    assert others.text({}) == ""
    box = others.box_text(here_results(tiny_run[0], "anatomy"))
    assert sentences.no_gpu_line() in box and "|" not in box  # the box says so in one line
    fig = chain_figs.latency_line(tiny_run[0]["chain"]["line"], compare.Comparison("chain", where=tmp_path))
    assert not lines_labelled(fig, "reference run")
    plt.close(fig)


def test_an_older_reference_says_what_it_lacks(tiny_run, tmp_path):
    old = copy.deepcopy(tiny_run[1])
    for name, entry in old["chapters"].items():
        del entry["results"][results.ROWS[name][1].key]  # a result added after this file was written
    save(old, tmp_path / "old.json")
    for chapter in fileformat.CHAPTERS:
        others = compare.Comparison(chapter, where=tmp_path)
        table = others.table(here_results(tiny_run[0], chapter))
        column = table[others.refs[0].label].tolist()
        assert compare.NOT_IN in column, chapter
        assert compare.NOT_IN not in table["this machine"].tolist()
    serving = compare.Comparison("serving", where=tmp_path)
    assert "serve_tok_per_s not in this reference" in serving.text({})
    assert serving.series("exchange_rate") == []  # the figure leaves it out rather than fail
    fig = serving_figs.exchange_rate(tiny_run[0]["serving"]["sweep"], serving)
    plt.close(fig)


def test_a_cpu_reference_shows_no_graph(tiny_run, folder):
    others = compare.Comparison("anatomy", where=folder)
    table = others.table(here_results(tiny_run[0], "anatomy"))
    graph_row = next(i for i in table.index if "CUDA Graph" in i)
    assert table.loc[graph_row, "this machine"] == compare.NOT_APPLICABLE
    assert table.loc[graph_row, GPU_LABEL] != compare.NOT_APPLICABLE
    text = others.text({})
    assert "no CUDA, so no graph" in text and "faster than eager" in text and "torch.compile" in text


def sentence_of(chapter, **values):
    base = {"chain": dict(step_ms=10.0, slope_ms=10.5),
            "serving": dict(serve_batches=[1, 64], serve_per_user=[40.0, 20.0], serve_gain=20.0,
                            serve_tok_per_s=[40.0, 800.0]),
            "intensity": dict(batches=[1, 64], step_growth=1.02, tok_per_s_gain=60.0, context_ratio=32.0,
                              context_growth=1.3)}[chapter]
    ref = compare.ChapterReference("reference run: X, 2026-12-02", "cuda", "w", {**base, **values}, "x.json")
    return sentences.sentence(chapter, ref, {"step_ms": 20.0})


def test_sentences_follow_the_numbers():
    assert "matches the step" in sentence_of("chain") and "2.0 times faster than this machine" in sentence_of("chain")
    assert "is 1.50 times the step: there, each generated token cost more" in sentence_of("chain", slope_ms=15.0)
    assert "went from 40.0 to 20.0" in sentence_of("serving")
    assert "stayed about the same" in sentence_of("serving", serve_per_user=[40.0, 39.5])
    assert "the step stayed about the same" in sentence_of("intensity")
    assert "the step grew 1.50 times" in sentence_of("intensity", step_growth=1.5)


def test_the_repository_references_load():
    refs = compare.committed()
    assert refs, "references/ holds the committed reference runs"
    for path, ref in refs:
        assert ref["chapters"] or ref["probes"], path  # every committed file holds something
        assert path.stat().st_size < 200_000, path  # small JSON: tens of kB
        for name, entry in ref["chapters"].items():
            assert name in fileformat.CHAPTERS, (path, name)
    assert compare.gpu_probes(), "a GPU's probes are committed (the exercise of chapter 2 reads them)"


def test_prefill_sentence_follows_the_share():
    base = dict(ttft_model="llama-3-8b", ttft_lengths=[1024, 8192], ttft_longest_ms=900.0, matmul_tflops=700.0)
    ref = compare.ChapterReference("reference run: X, 2026-12-02", "cuda", "w", {**base, "achieved_longest_pct": 80.0},
                                   "x.json")
    text = sentences.sentence("prefill", ref, {})
    assert "as a compute-bound pass should" in text
    # the rate the pass reached, then its share of the probe's: a percentage of a rate, not of a time
    assert "took 900.0 ms to prefill 8,192 tokens: 560 TFLOP/s, 80 % of the 700 TFLOP/s its matmul probe" in text
    low = ref._replace(results={**base, "achieved_longest_pct": 20.0})
    assert "held the pass back" in sentences.sentence("prefill", low, {})
    cpu = ref._replace(results={**base, "matmul_tflops": 0.0855, "achieved_longest_pct": 84.0})  # a CPU: GFLOP/s
    assert ": 71.8 GFLOP/s, 84 % of the 85.5 GFLOP/s its matmul probe reached" in sentences.sentence("prefill", cpu, {})


@pytest.mark.parametrize("tflops, text", [(0.0855, "85.5 GFLOP/s"), (0.005, "5.00 GFLOP/s"), (0.999, "999 GFLOP/s"),
                                          (1.0, "1.00 TFLOP/s"), (42.0, "42.0 TFLOP/s"), (1234.0, "1,234 TFLOP/s")])
def test_flop_rates_are_written_in_giga_below_a_tera(tflops, text):
    assert sentences.flop_rate(tflops) == text


def test_a_result_of_another_kind_reads_as_missing():
    ref = compare.ChapterReference("reference run: X, 2026-12-02", "cpu", "w",
                                   {"batches": 64, "step_growth": [1.0], "tok_per_s_gain": 2.0, "context_ratio": 16.0,
                                    "context_growth": [1.0, 1.2], "batch_tok_per_s": [1.0, "x"]}, "x.json")
    others = compare.Comparison("intensity", refs=[ref])
    assert "not in this reference" in others.text({})
    assert compare.NOT_IN in others.table({}).iloc[:, 1].tolist()
    assert others.series("batch_sweep") == []


def test_the_tokenizer_travels_as_a_file(smollm2, tmp_path, capsys):
    """--save-tokenizer writes the GGUF's tokenizer; a random-weight run reads it where there is no GGUF."""
    _, tokenizer = smollm2
    path = tmp_path / "tokenizer.json"
    assert main(["--save-tokenizer", str(path)]) == 0 and "wrote" in capsys.readouterr().out
    assert path.stat().st_size < 5e6
    from llmperf.tokenizer import Tokenizer

    again = Tokenizer.load(path)
    text = "The three primary colours are 1, 2 and 3.<|im_end|>"
    assert again.encode(text) == tokenizer.encode(text) and again.encode_chat("Hi") == tokenizer.encode_chat("Hi")
    with threads_kept():
        s, weights = runner.make_setup("cpu", weights="random", tokenizer_path=path)
    assert weights == runner.RANDOM and s.model.cfg.name == "smollm2-135m" and s.tokenizer.vocab_size == 49152
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a tokenizer file"):
        Tokenizer.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="weights must be"):
        runner.make_setup("cpu", weights="pretty")


def test_the_runner_needs_no_jupyter(tiny_run):
    """A GPU machine has no Jupyter and no myst_nb: the whole run, every chapter, imports neither (`tiny_run`)."""
    live, ref = tiny_run
    assert set(live) == set(ref["chapters"]) == set(fileformat.CHAPTERS)


def test_more_sentence_branches():
    assert "tokens/s fell to 0.50 times" in sentence_of("intensity", tok_per_s_gain=0.5)
    assert "the server’s output stayed about the same" in sentence_of("serving", serve_gain=1.02)
    gpu = dict(ops_per_step=1600, plain_step_ms=30.0, op_us=12.0, fixed_share_pct=60.0, eager_ms=30.0,
               graph_ms=10.0, compiled_ms=None, kernels_per_step=None, launch_removed_pct=66.7)
    ref = compare.ChapterReference("reference run: X, 2026-12-02", "cuda", "w", gpu, "x.json")
    text = sentences.sentence("anatomy", ref, {})
    assert "the profiler counted no kernels" in text and "removed 67 %" in text and "torch.compile" not in text
    same = ref._replace(results={**gpu, "graph_ms": 29.5, "launch_removed_pct": 1.7, "kernels_per_step": 1418})
    text = sentences.sentence("anatomy", same, {})
    assert "1,418 kernels" in text and "about as fast as eager" in text and "removed" not in text


def test_a_bad_file_is_left_out_of_a_chapter_and_named(tiny_run, tmp_path):
    save(tiny_run[1], tmp_path / "good.json")
    (tmp_path / "broken.json").write_text("{oops")
    others = compare.Comparison("chain", where=tmp_path)
    assert len(others.refs) == 1 and "broken.json" in others.text({}) and "not valid JSON" in others.text({})
    with pytest.raises(ReferenceFileError, match="broken.json"):  # the strict loader, as the command line uses
        compare.committed(tmp_path)


def test_a_series_names_the_model_it_timed(folder):
    (label, xs, ys), _ = compare.Comparison("prefill", where=folder).series("ttft")
    assert label == f"{GPU_LABEL}, tiny" and len(xs) == len(ys)


def test_the_overview_has_a_column_per_file(folder, tmp_path):
    frame = compare.overview(folder).data
    assert list(frame.columns) == ["references/test-cpu.json", "references/test-h200.json"]
    assert frame.loc["device", "references/test-h200.json"] == "NVIDIA H200" and frame.loc["sizes cut"].tolist() == [
        "none", "none"]
    assert "one tiny op (µs)" in frame.index and compare.overview(tmp_path).data.empty


def test_the_box_sets_each_gpu_beside_this_machine(tiny_run, folder):
    for chapter in fileformat.CHAPTERS:
        others = compare.Comparison(chapter, where=folder)
        box = others.box_text(here_results(tiny_run[0], chapter))
        assert box.startswith(":::{admonition}") and box.rstrip().endswith(":::")
        assert "NVIDIA H200, 2026-12-02" in box and "AMD" not in box and "Test CPU" not in box  # GPUs only
        rows = [row for row in results.ROWS[chapter] if row.box]
        assert rows and all(row.heading in box for row in rows), chapter


def test_a_speed_ratio_only_where_both_measured_the_same_work():
    time = results.Row("step_ms", "step", "ms", speed="time")
    rate = results.Row("tok", "tokens/s", "tokens/s", pick="first", speed="rate")
    count = results.Row("ops", "ops", "")
    assert compare.speed_ratio(time, {"step_ms": 2.0}, {"step_ms": 50.0}) == "25×"  # theirs took less: faster
    assert compare.speed_ratio(rate, {"tok": [600.0, 1.0]}, {"tok": [20.0]}) == "30×"
    assert compare.speed_ratio(time, {"step_ms": 100.0}, {"step_ms": 50.0}) == "0.5×"
    assert compare.speed_ratio(count, {"ops": 5}, {"ops": 5}) == compare.NOT_APPLICABLE
    assert compare.speed_ratio(time, {"step_ms": None}, {"step_ms": 5.0}) == compare.NOT_APPLICABLE
    assert compare.speed_ratio(time, {}, {"step_ms": 5.0}) == compare.NOT_APPLICABLE


def test_a_gpu_reference_of_chapter_5_without_the_plain_step_still_gets_its_sentence():
    """The H200's chapter 5 was recorded before reference runs existed: its graph, not its plain step."""
    partial = dict(kernels_per_step=1179, op_us=15.9, eager_ms=24.3, graph_ms=3.3, compiled_ms=2.6,
                   launch_removed_pct=86.4)
    ref = compare.ChapterReference("reference run: NVIDIA H200, 2026-11-29", "cuda", "w", partial, "x.json")
    text = sentences.sentence("anatomy", ref, {})
    assert "1,179 kernels" in text and "24.3 ms" in text and "3.3 ms" in text and "not in this reference" not in text
    cpu = ref._replace(device_type="cpu", results=dict(op_us=2.0, graph_ms=None))
    assert "ops_per_step, plain_step_ms, fixed_share_pct not in this reference" in sentences.sentence("anatomy", cpu, {})


def test_the_committed_references_say_what_measured_them():
    """Every committed file loads; a chapter entry written by hand (before the runner existed) names the commit
    and the script that measured it, and every chapter's sentence about it reads its numbers."""
    for path, ref in compare.committed():
        for name, entry in ref["chapters"].items():
            if not entry["records"]:  # not written by the runner, which keeps every record
                assert "commit" in entry["environment"]["measured_by"], (path, name)
            chapter_ref = next(r for r in compare.references(name) if r.path == str(path))
            assert "not in this reference" not in sentences.sentence(name, chapter_ref, {}), (path, name)
    h200 = compare.references("anatomy")[0]
    assert h200.gpu and h200.results["graph_ms"] < h200.results["eager_ms"]
    assert compare.references("serving")[0].gpu

"""The calculator's predictions (llmperf.calculator) and the interactive views (llmperf.explore), in CPython.

The views run in the reader's browser too (tests/test_site_explore.py checks that what a browser shows equals
what these compute); here: what each figure means, that bad input is refused with the control's name, and
that the browser's zip is self-contained, running with the standard library alone."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile

import pytest
from hypothesis import given, settings, strategies as st

from llmperf import calculator, cost
from llmperf.accelerators import ACCELERATORS, Accelerator, roofline_time_in_parts
from llmperf.config import PRESETS
from llmperf.explore import bundle, page, views

H100 = ACCELERATORS["H100 SXM"]
VALUE = re.compile(r'data-name="([^"]+)" data-value="([^"]+)"')


def shown(result: dict) -> dict[str, float]:
    """The exact values a view's table carries, by name."""
    return {name: float(value) for name, value in VALUE.findall(result["html"])}


# --- the calculator --------------------------------------------------------------------------------

def test_batch_one_decode_on_an_h100_reads_the_weights_and_cache_at_the_bandwidth():
    s = calculator.Setup("llama-3-8b", H100, batch=1, prompt=512, answer=256)
    p = calculator.predict(s)
    step = cost.decode_bytes("llama-3-8b", 512 + 128, 1, 2, 2).total  # the middle of an even answer
    assert p.tpot == pytest.approx(step / H100.bandwidth, rel=1e-12)  # memory-bound: bytes ÷ bandwidth
    assert p.bound == "memory" and p.intensity < p.ridge
    assert p.e2e == pytest.approx(p.ttft + 255 * p.tpot)
    assert p.user_rate == pytest.approx(1 / p.tpot) and p.batch_rate == pytest.approx(1 / p.tpot)
    assert p.kv_per_sequence == 768 * cost.kv_bytes_per_token("llama-3-8b", 2)


models = st.sampled_from([m for m in PRESETS if m != "tiny"])
rows = st.sampled_from(list(ACCELERATORS.values()))


@settings(max_examples=40, deadline=None)
@given(models, rows, st.integers(1, 256), st.integers(1, 2048), st.integers(2, 2048),
       st.sampled_from(list(calculator.DTYPES)))
def test_tpot_is_the_mean_step_of_the_answer(model, hw, batch, prompt, answer, dtype):
    """The middle step stands for every step: a step's time is linear in its context."""
    s = calculator.Setup(model, hw, batch=batch, prompt=prompt, answer=answer, weight_dtype=dtype, kv_dtype=dtype)
    steps = [roofline_time_in_parts(cost.decode_parts(model, c, batch, s.wbytes, s.kvbytes), hw)
             for c in range(prompt + 1, prompt + answer)]
    assert calculator.predict(s).tpot == pytest.approx(sum(steps) / len(steps), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(models, rows, st.integers(1, 4096), st.sampled_from([1, 2, 4, 8]))
def test_the_largest_batch_is_the_last_that_fits(model, hw, context, devices):
    s = calculator.Setup(model, hw, prompt=max(1, context // 2), answer=max(1, context - context // 2),
                         devices=devices)
    p = calculator.predict(s)
    used = lambda b: p.weights + b * p.kv_per_sequence  # noqa: E731
    if p.max_batch:
        assert used(p.max_batch) <= p.usable < used(p.max_batch + 1)
    else:
        assert used(1) > p.usable


def test_devices_multiply_every_roof_and_the_memory():
    one = calculator.predict(calculator.Setup("llama-3-70b", ACCELERATORS["H200 SXM"], batch=8))
    two = calculator.predict(calculator.Setup("llama-3-70b", ACCELERATORS["H200 SXM"], batch=8, devices=2))
    assert two.tpot == pytest.approx(one.tpot / 2) and two.ttft == pytest.approx(one.ttft / 2)
    assert one.max_batch == 0 and two.max_batch > 0  # 70B in bf16 fits two H200s, not one
    assert two.ridge == pytest.approx(one.ridge)


@pytest.mark.parametrize("change, named", [({"batch": 0}, "batch"), ({"prompt": 2.5}, "prompt"),
                                           ({"answer": True}, "answer"), ({"devices": -1}, "devices"),
                                           ({"weight_dtype": "int3"}, "weight_dtype"),
                                           ({"prompt": 8000, "answer": 500}, "context")])
def test_a_bad_setup_is_refused_naming_what_is_wrong(change, named):
    with pytest.raises(ValueError, match=named):
        calculator.Setup(**{"model": "llama-3-8b", "accelerator": H100, **change})


def test_an_unknown_accelerator_lists_the_known_ones():
    with pytest.raises(ValueError, match="H100 SXM"):
        calculator.accelerator("H9000")


# --- the views ------------------------------------------------------------------------------------

def test_the_controls_offer_every_model_and_accelerator_with_a_label():
    config = {"kind": "calculator", "extra": [page.accelerator_row(H100, "mine")]}
    controls = {c["name"]: c for c in views.controls(config)}
    assert set(controls) == set(views.CONTROLS["calculator"])
    assert [v for v, _ in controls["model"]["options"]] == [m for m in PRESETS if m != "tiny"]
    assert [v for v, _ in controls["accelerator"]["options"]] == ["mine", *ACCELERATORS]
    assert all(c["label"] for c in controls.values())


@pytest.mark.parametrize("kind", views.KINDS)
def test_every_view_shows_its_defaults_as_a_table_and_a_figure(kind):
    result = views.render({"kind": kind})
    assert result["error"] is None and shown(result) and result["figure"]["data"]
    json.dumps(result)  # what the browser receives


def test_the_calculator_table_is_the_prediction():
    inputs = {"model": "mistral-7b", "accelerator": "L40S", "batch": "12", "prompt": "1000", "answer": "300",
              "weight_dtype": "fp8", "kv_dtype": "bfloat16", "devices": "2"}
    values = shown(views.render({"kind": "calculator"}, inputs))
    p = calculator.predict(calculator.Setup("mistral-7b", ACCELERATORS["L40S"], batch=12, prompt=1000, answer=300,
                                            weight_dtype="fp8", kv_dtype="bfloat16", devices=2))
    for name in ("ttft", "tpot", "e2e", "user_rate", "batch_rate", "kv_per_sequence", "kv_batch", "weights",
                 "max_batch", "intensity"):
        assert values[name] == getattr(p, name), name


def test_the_exchange_rate_trades_each_users_speed_for_the_servers():
    result = views.render({"kind": "exchange"})
    trace = result["figure"]["data"][0]
    assert trace["x"] == sorted(trace["x"], reverse=True)  # per user: slower with each batch
    # the whole batch: faster, until every part is bound by its own batch-sized work (then level)
    assert all(b >= a * (1 - 1e-12) for a, b in zip(trace["y"], trace["y"][1:]))
    assert views.render({"kind": "exchange"}, {"model": "llama-3-70b", "accelerator": "L4"})["error"]


def test_measured_points_are_drawn_beside_the_prediction():
    measured = [{"label": "here", "x": [1, 2], "y": [0.5, 0.9]}]
    data = views.render({"kind": "latency", "measured": measured})["figure"]["data"]
    assert data[-1]["name"] == "here" and data[-1]["mode"] == "markers"


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(views.KINDS), st.sampled_from(["batch", "prompt", "answer", "context", "devices"]),
       st.one_of(st.text(max_size=8), st.integers(-5, 0), st.floats(allow_nan=True)))
def test_bad_input_is_an_error_naming_the_control_never_an_exception(kind, name, value):
    result = views.render({"kind": kind}, {name: value})
    if result["error"]:
        assert result["html"] == "" and result["figure"] is None
        assert views.NUMBERS[name][0] in result["error"] or "context" in result["error"]


def test_an_unknown_model_or_accelerator_is_refused():
    assert "Model" in views.render({"kind": "roofline"}, {"model": "gpt-9"})["error"]
    assert "Unknown accelerator" in views.render({"kind": "roofline"}, {"accelerator": "abacus"})["error"]


# --- what the page embeds, and what the browser loads ------------------------------------------------

def test_an_embed_carries_its_config_and_shows_the_defaults():
    here = Accelerator("this machine", 2e11, 3e10, 2.5e10, "probe")
    html = page.calculator_view(here)._repr_html_()
    config = json.loads(re.search(r'data-config="([^"]+)"', html).group(1).replace("&quot;", '"')
                        .replace("&#x27;", "'").replace("&amp;", "&"))
    assert config["kind"] == "calculator" and config["autoload"]
    assert config["extra"][0]["name"] == page.HERE
    assert [s["label"] for s in config["scenarios"]] == ["Llama-3-8B on an H100", "SmolLM2 on this machine"]
    assert "<table" in html and 'data-name="ttft"' in html


def test_the_calculator_page_quotes_what_the_browser_loads():
    numbers = page.numbers(Accelerator("this machine (a CPU)", 2e11, 3e10, 2.5e10, "probe"))
    assert numbers["explore_mb"] == bundle.weight() / 1e6 and numbers["explore_util_pct"] == 90
    assert numbers["explore_here"].startswith("this machine (a CPU): 200 GFLOP/s, 30 GB/s")


def test_the_committed_gpu_references_are_offered_as_probed_rows():
    rows = page.probed_rows()
    assert any(r["name"].startswith("NVIDIA H200, probed") for r in rows)
    for r in rows:
        assert r["flops"] > 0 and r["bandwidth"] > 0 and r["memory"] > 0


def test_the_zip_runs_with_the_standard_library_alone(tmp_path):
    """What the browser gets: the pure modules, importable with no site-packages (python -S), every view
    rendering exactly what this process renders, and nothing but the standard library imported."""
    zipfile.ZipFile(__import__("io").BytesIO(bundle.zipped())).extractall(tmp_path)
    config = {"kind": "calculator", "extra": page.probed_rows()}
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from llmperf.explore import views\n"
        f"config = json.loads({json.dumps(json.dumps(config))})\n"
        "out = [views.render({**config, 'kind': k}) for k in views.KINDS]\n"
        "mods = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'pandas'))\n"
        "print(json.dumps({'out': out, 'mods': mods}))\n")
    result = subprocess.run([sys.executable, "-S", "-I", "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert got["mods"] == []
    assert got["out"] == [json.loads(json.dumps(views.render({**config, "kind": k}))) for k in views.KINDS]


def test_a_missing_npm_install_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle, "ROOT", tmp_path)
    with pytest.raises(RuntimeError, match="npm ci"):
        bundle.node_modules()

"""The interactive views: for each kind, its controls and what it shows for the reader's inputs.

Pure Python (no torch): the site runs this module in the reader's browser
(Pyodide), and the build runs it to show each view's defaults. Every number
comes from `llmperf.calculator` and `llmperf.cost`; the page's JavaScript only
draws what `render` returns: an HTML table (the numbers as text, each with its
exact value in `data-value`) and a Plotly figure as a plain dict.

A view's `config` is a dict: "kind" (one of `KINDS`), "inputs" (the defaults, by
control name), "extra" (accelerator rows beyond the table, such as this
machine's probe: name, flops, bandwidth, memory, source) and "measured" (series
drawn as markers: label, x, y, in the figure's units).
"""

from __future__ import annotations

import html

from .. import calculator, cost
from ..accelerators import ACCELERATORS, Accelerator, roofline_time, roofline_time_in_parts
from ..config import PRESETS

KINDS = ("calculator", "roofline", "exchange", "latency")
MODELS = [name for name in PRESETS if name != "tiny"]
NUMBERS = {  # control name: (label, the unit after the box)
    "batch": ("Batch size", "sequences"), "prompt": ("Prompt", "tokens"), "answer": ("Answer", "tokens"),
    "context": ("Context", "tokens"), "devices": ("Devices", "(tensor parallel)"),
}
CONTROLS = {
    "calculator": ("model", "accelerator", "devices", "weight_dtype", "kv_dtype", "batch", "prompt", "answer"),
    "roofline": ("model", "accelerator", "weight_dtype", "batch", "context"),
    "exchange": ("model", "accelerator", "weight_dtype", "prompt", "answer"),
    "latency": ("model", "accelerator", "weight_dtype", "prompt", "answer"),
}
DEFAULTS = {"model": "llama-3-8b", "accelerator": "H100 SXM", "devices": 1, "weight_dtype": "bfloat16",
            "kv_dtype": "bfloat16", "batch": 1, "prompt": 512, "answer": 256, "context": 1024}


def rows(config: dict) -> dict[str, Accelerator]:
    """Every accelerator a view offers: the config's extra rows first, then the datasheet table."""
    extra = {r["name"]: Accelerator(r["name"], float(r["flops"]), float(r["bandwidth"]), float(r["memory"]),
                                    r.get("source", "measured")) for r in config.get("extra", [])}
    return {**extra, **ACCELERATORS}


def controls(config: dict) -> list[dict]:
    """The view's controls, in order: {"name", "label", "type": "select" | "number", "value", and "options"
    ([value, label] pairs) or "min" and "unit"}."""
    kind = _kind(config)
    inputs = {**DEFAULTS, **config.get("inputs", {})}
    out = []
    for name in CONTROLS[kind]:
        if name in NUMBERS:
            label, unit = NUMBERS[name]
            out.append({"name": name, "label": label, "type": "number", "min": 1, "unit": unit,
                        "value": inputs[name]})
            continue
        if name == "model":
            options = [[m, f"{m} ({PRESETS[m].num_params() / 1e9:.2g} B parameters)"] for m in MODELS]
            label = "Model"
        elif name == "accelerator":
            options = [[n, f"{n}: {hw.flops / 1e12:,.3g} TFLOP/s, {hw.bandwidth / 1e9:,.0f} GB/s, "
                           f"{hw.memory / 1e9:,.0f} GB"] for n, hw in rows(config).items()]
            label = "Accelerator"
        else:
            options = [[d, f"{d} ({b} byte{'s' if b > 1 else ''})"] for d, b in calculator.DTYPES.items()]
            label = "Weights' dtype" if name == "weight_dtype" else "KV cache's dtype"
        out.append({"name": name, "label": label, "type": "select", "options": options, "value": inputs[name]})
    return out


def render(config: dict, inputs: dict | None = None) -> dict:
    """What the view shows for `inputs` (default: the config's): {"html", "figure", "error"}. Bad input is an
    "error" message naming the control, with no table or figure, never an exception."""
    kind = _kind(config)
    try:
        values = _read(config, {**DEFAULTS, **config.get("inputs", {}), **(inputs or {})})
        shown = _VIEWS[kind](values, config.get("measured", []))
    except ValueError as err:
        return {"html": "", "figure": None, "error": str(err)}
    return {"html": shown[0], "figure": shown[1], "error": None}


def shown_rows(config: dict, inputs: dict) -> list[tuple[str, str]]:
    """The calculator's figures for `inputs` as (label, text shown) pairs: its table without the "why"."""
    values = _read(config, {**DEFAULTS, **inputs})
    return [(label, text) for _, label, _, text, _ in _calculator_rows(calculator.predict(setup(values)))]


def setup(values: dict, **changes) -> calculator.Setup:
    """The calculator's Setup for a view's read inputs (`changes` override them)."""
    v = {**values, **changes}
    return calculator.Setup(v["model"], v["accelerator"], batch=v["batch"], prompt=v["prompt"], answer=v["answer"],
                            weight_dtype=v["weight_dtype"], kv_dtype=v["kv_dtype"], devices=v["devices"])


# --- the four views ------------------------------------------------------------------------------

def _calculator(v: dict, measured: list) -> tuple[str, dict]:
    p = calculator.predict(setup(v))
    step = _step(p.setup, calculator.middle_context(p.setup))
    return (_table(_calculator_rows(p), ("quantity", "value", "why")),
            _roofline_figure(p.setup.hw, [("decode step", step)], measured))


def _calculator_rows(p: calculator.Prediction) -> list[tuple]:
    s, hw = p.setup, p.setup.hw
    n = f"{s.batch:,} × " if s.batch > 1 else ""
    return [
        ("ttft", "Time to first token (TTFT)", p.ttft, _seconds(p.ttft),
         f"the prefill of {n}{s.prompt:,} prompt tokens in one pass, at the roofline"),
        ("tpot", "Time per output token (TPOT)", p.tpot, _seconds(p.tpot),
         f"the answer's mean decode step, at its middle (context {calculator.middle_context(s):,}): it reads "
         "every weight once and each sequence's KV cache"),
        ("user_rate", "Tokens/s per user", p.user_rate, f"{p.user_rate:,.4g} tokens/s", "1 ÷ TPOT"),
        ("batch_rate", "Tokens/s, the whole batch", p.batch_rate, f"{p.batch_rate:,.4g} tokens/s",
         "batch ÷ TPOT: the batch shares each step's weight reads"),
        ("e2e", "End to end (E2E)", p.e2e, _seconds(p.e2e), f"TTFT + ({s.answer:,} − 1) × TPOT"),
        ("kv_per_sequence", "KV cache, one sequence", p.kv_per_sequence, _bytes(p.kv_per_sequence),
         f"a key and a value per layer for {s.prompt + s.answer:,} tokens, {s.kv_dtype}"),
        ("kv_batch", "KV cache, the batch", p.kv_batch, _bytes(p.kv_batch),
         f"{s.batch:,} sequence{'s' if s.batch > 1 else ''}" + ("" if p.fits else ": more than fits")),
        ("weights", "Weights", p.weights, _bytes(p.weights), f"every parameter, {s.weight_dtype}"),
        ("max_batch", "Largest batch that fits", p.max_batch, f"{p.max_batch:,} sequences",
         f"KV caches in {100 * calculator.UTILISATION:.0f} % of {_bytes(hw.memory)} less the weights"
         + ("" if p.max_batch else ": the weights alone do not fit")),
        ("intensity", "Decode step's intensity", p.intensity, f"{p.intensity:,.3g} FLOPs/byte",
         f"against {hw.name}'s ridge of {p.ridge:,.0f} FLOPs/byte: {p.bound}-bound"),
    ]


def _roofline(v: dict, measured: list) -> tuple[str, dict]:
    s, context = setup(v, prompt=1, answer=1), v["context"]
    if context > s.cfg.max_seq_len:
        raise ValueError(f"Context: {context:,} tokens is more than {s.model}'s {s.cfg.max_seq_len:,}.")
    parts = cost.decode_parts(s.cfg, context, s.batch, s.wbytes, s.kvbytes)
    step = _step(s, context)
    t, ridge = roofline_time_in_parts(parts, s.hw), s.hw.ridge
    bound = "compute" if step.intensity >= ridge else "memory"
    table = [("intensity", "Decode step's intensity", step.intensity, f"{step.intensity:,.3g} FLOPs/byte",
              f"batch {s.batch:,} at context {context:,}: {bound}-bound"),
             ("weights_intensity", "its weight products", parts["weights"].intensity,
              f"{parts['weights'].intensity:,.3g} FLOPs/byte", "grows with the batch"),
             ("attention_intensity", "its attention", parts["attention"].intensity,
              f"{parts['attention'].intensity:,.3g} FLOPs/byte", "set by the query heads per key-value head"),
             ("ridge", "Ridge point", ridge, f"{ridge:,.0f} FLOPs/byte", "peak ÷ bandwidth"),
             ("step_time", "One step at the roofline", t, _seconds(t), "each part at its own roof, in turn")]
    points = [("decode step", step), ("weight products", parts["weights"]), ("attention", parts["attention"])]
    return _table(table, ("quantity", "value", "why")), _roofline_figure(s.hw, points, measured)


def _step(s: calculator.Setup, context: int) -> cost.OpCost:
    """One decode step's FLOPs and bytes at `context`, as one op."""
    f = cost.decode_flops(s.cfg, context, s.batch).total
    return cost.OpCost("step", f, cost.decode_bytes(s.cfg, context, s.batch, s.wbytes, s.kvbytes).total, 1)


def _exchange(v: dict, measured: list) -> tuple[str, dict]:
    one = calculator.predict(setup(v, batch=1))
    if one.max_batch < 1:
        raise ValueError(f"{v['model']}'s weights ({_bytes(one.weights)}) leave no room for a KV cache in "
                         f"{100 * calculator.UTILISATION:.0f} % of {v['accelerator'].name}'s memory: pick more memory or "
                         "a smaller dtype.")
    batches = sorted({b for b in (2 ** i for i in range(13)) if b <= one.max_batch} | {one.max_batch})
    preds = [calculator.predict(setup(v, batch=b)) for b in batches]
    table = [(f"batch_{p.setup.batch}", f"{p.setup.batch:,}", p.batch_rate, f"{p.batch_rate:,.4g}",
              f"{p.user_rate:,.4g}") for p in preds]
    traces = [{"type": "scatter", "mode": "lines+markers", "name": "predicted, one point per batch size",
               "x": [p.user_rate for p in preds], "y": [p.batch_rate for p in preds],
               "text": [f"batch {p.setup.batch:,}" for p in preds]}]
    layout = _layout("tokens/s per user", "tokens/s, the whole batch", log_x=True, log_y=True)
    return (_table(table, ("batch size", "tokens/s, the whole batch", "tokens/s per user"), numeric=True),
            {"data": traces + _measured(measured), "layout": layout})


def _latency(v: dict, measured: list) -> tuple[str, dict]:
    answer = v["answer"]
    ns = sorted({1 + (answer - 1) * i // 20 for i in range(21)})
    preds = [calculator.predict(setup(v, answer=n)) for n in ns]
    last = preds[-1]
    table = [("ttft", "TTFT", last.ttft, _seconds(last.ttft), f"the prefill of {v['prompt']:,} tokens"),
             ("tpot", "TPOT", last.tpot, _seconds(last.tpot), "one decode step, the answer's middle"),
             ("e2e", f"E2E for {answer:,} tokens", last.e2e, _seconds(last.e2e), "TTFT + (N − 1) × TPOT")]
    traces = [{"type": "scatter", "mode": "lines", "name": "TTFT + (N − 1) × TPOT, predicted",
               "x": ns, "y": [p.e2e for p in preds]}]
    layout = _layout("tokens generated, N", "end-to-end time (s)")
    return _table(table, ("quantity", "value", "why")), {"data": traces + _measured(measured), "layout": layout}


_VIEWS = {"calculator": _calculator, "roofline": _roofline, "exchange": _exchange, "latency": _latency}


# --- reading inputs, showing numbers -------------------------------------------------------------

def _kind(config: dict) -> str:
    kind = config.get("kind")
    if kind not in KINDS:
        raise ValueError(f"Unknown view {kind!r}: one of {', '.join(KINDS)}.")
    return kind


def _read(config: dict, raw: dict) -> dict:
    """The inputs as the calculator takes them: numbers as ints, the accelerator as its row."""
    values = dict(raw)
    for name, (label, _) in NUMBERS.items():
        text = str(raw[name]).strip()
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"{label}: {text!r} is not a whole number of at least 1.")
        values[name] = int(text)
    if raw["model"] not in MODELS:
        raise ValueError(f"Model: {raw['model']!r} is not one of {', '.join(MODELS)}.")
    values["accelerator"] = calculator.accelerator(raw["accelerator"], rows(config))
    return values


def _seconds(x: float) -> str:
    return f"{x * 1e3:,.3g} ms" if x < 1 else f"{x:,.3g} s"


def _bytes(x: float) -> str:
    return f"{x / 1e9:,.3g} GB" if x >= 1e9 else f"{x / 1e6:,.3g} MB"


def _table(table: list[tuple], header: tuple[str, ...], numeric: bool = False) -> str:
    """An HTML table: each row's first item names it (data-name), its second is the reader's label, its
    third the exact value (data-value, on the cell that shows it), the rest the text shown (numbers, with
    `numeric`, else words)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    rest = "llmperf-number" if numeric else "llmperf-text"
    body = []
    for name, label, value, *shown in table:
        cells = [f'<td class="{rest}">{html.escape(str(label))}</td>',
                 f'<td class="llmperf-number" data-name="{name}" data-value="{value!r}">{html.escape(shown[0])}</td>']
        cells += [f'<td class="{rest}">{html.escape(text)}</td>' for text in shown[1:]]
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f'<table class="llmperf-explore-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _layout(x: str, y: str, log_x: bool = False, log_y: bool = False) -> dict:
    def axis(title: str, log: bool) -> dict:
        return {"title": {"text": title}, **({"type": "log", "dtick": 1} if log else {"rangemode": "tozero"})}

    return {"xaxis": axis(x, log_x), "yaxis": axis(y, log_y),
            "margin": {"l": 60, "r": 10, "t": 10, "b": 50}, "height": 380,
            "legend": {"orientation": "h", "y": -0.25}}


def _measured(measured: list) -> list[dict]:
    return [{"type": "scatter", "mode": "markers", "name": m["label"], "x": m["x"], "y": m["y"],
             "marker": {"size": 9, "symbol": "circle-open"}} for m in measured]


def _attainable(hw: Accelerator, intensity: float) -> float:
    """FLOP/s the roofline allows work of `intensity` FLOPs per byte: intensity ÷ the time of 1 byte's work."""
    return intensity / roofline_time(intensity, 1, hw)


def _roofline_figure(hw: Accelerator, points: list[tuple[str, cost.OpCost]], measured: list) -> dict:
    """The roofline of `hw` (FLOP/s attainable against intensity, log-log) with each op on its roof."""
    shown = [(label, op.intensity) for label, op in points if op.intensity > 0]
    lo = min([0.1] + [i / 3 for _, i in shown])
    hi = max([hw.ridge * 30] + [i * 3 for _, i in shown])
    roof = {"type": "scatter", "mode": "lines", "name": f"{hw.name}'s roofline",
            "x": [lo, hw.ridge, hi], "y": [_attainable(hw, x) for x in (lo, hw.ridge, hi)]}
    dots = [{"type": "scatter", "mode": "markers", "name": label, "x": [i], "y": [_attainable(hw, i)],
             "marker": {"size": 11}} for label, i in shown]
    return {"data": [roof] + dots + _measured(measured),
            "layout": _layout("arithmetic intensity (FLOPs/byte)", "FLOP/s attainable", log_x=True, log_y=True)}

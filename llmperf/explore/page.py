"""The build's side of the interactive views: what a notebook cell shows (`embed`), the accelerator rows it
offers beyond the table, and the weight of what the browser loads.

Runs in CPython only (a notebook, the book's build); `views` is what runs in the browser.
"""

from __future__ import annotations

import html
import json

from .. import calculator
from . import bundle, views


class Embed:
    """A view in a notebook's output: `views.render`'s table for the defaults inside a `div.llmperf-explore`
    whose `data-config` the page's script reads (`views`'s docstring says what a config holds)."""

    def __init__(self, config: dict):
        self.config = config
        self.shown = views.render(config)
        if self.shown["error"]:
            raise ValueError(f"The {config['kind']} view's defaults are refused: {self.shown['error']}")

    def _repr_html_(self) -> str:
        note = ("Interactive on the course's site, served over HTTP: change the inputs and every number and the "
                "figure follow. Here, the defaults, computed by llmperf.calculator.")
        return (f'<div class="llmperf-explore" data-config="{html.escape(json.dumps(self.config), quote=True)}">'
                f'<p class="llmperf-explore-status">{note}</p>'
                f'<div class="llmperf-explore-shown">{self.shown["html"]}</div></div>')


def embed(kind: str, inputs: dict | None = None, extra: list | None = None, measured: list | None = None,
          scenarios: list | None = None, autoload: bool = False) -> Embed:
    """A view of `kind` (`views.KINDS`) for a page: `inputs` its defaults, `extra` accelerator rows beyond the
    table (`accelerator_row`), `measured` series drawn as markers ({"label", "x", "y"}), `scenarios` named
    sets of inputs offered as buttons ({"label", "inputs"}), `autoload` to start without a click (the
    calculator's own page). The committed GPU references' probes are always offered (`probed_rows`)."""
    config = {"kind": kind, "inputs": dict(inputs or {}), "extra": list(extra or []) + probed_rows(),
              "measured": list(measured or []), "scenarios": list(scenarios or []), "autoload": autoload,
              "megabytes": bundle.weight() / 1e6}
    return Embed(config)


def accelerator_row(hw, name: str | None = None) -> dict:
    """An Accelerator (a probe's, say) as a view's extra row, under `name` if given."""
    return {"name": name or hw.name, "flops": hw.flops, "bandwidth": hw.bandwidth, "memory": hw.memory,
            "source": hw.source}


def probed_rows() -> list[dict]:
    """Each committed GPU reference's probes as an accelerator row: the bf16 matmul's rate for the peak, the
    read bandwidth (else the copy's), and the memory of the table's row for that device."""
    from ..accelerators import table_row
    from ..references.compare import gpu_probes

    out = []
    for p in gpu_probes():
        row, v = table_row(p.device_name), p.values
        bandwidth = v.get("read_bandwidth") or v.get("copy_bandwidth")
        if row is None or not bandwidth or not v.get("matmul_bfloat16"):
            continue
        out.append({"name": f"{p.device_name}, probed ({p.label.rsplit(', ', 1)[-1]})", "flops": v["matmul_bfloat16"],
                    "bandwidth": bandwidth, "memory": row.memory, "source": p.label})
    return out


HERE = "this machine, probed"


def calculator_view(here) -> Embed:
    """The calculator page's view: Llama-3-8B on an H100 SXM to start, and SmolLM2 in float32 on `here` (this
    machine's probe, an Accelerator) a click away."""
    return embed("calculator", extra=[accelerator_row(here, HERE)], scenarios=SCENARIOS, autoload=True)


_START = {name: views.DEFAULTS[name] for name in views.CONTROLS["calculator"]}
SCENARIOS = [
    {"label": "Llama-3-8B on an H100", "inputs": _START},
    {"label": "SmolLM2 on this machine",
     "inputs": {**_START, "model": "smollm2-135m", "accelerator": HERE, "weight_dtype": "float32",
                "kv_dtype": "float32"}},
]
"""The calculator's two starting points, each a button."""


def scenarios_table(here):
    """`SCENARIOS` side by side, as the calculator shows each: one row per figure, one column per scenario."""
    import pandas as pd

    config = {"kind": "calculator", "extra": [accelerator_row(here, HERE)]}
    columns = {}
    for s in SCENARIOS:
        shown = views.shown_rows(config, s["inputs"])
        columns[s["label"]] = {label: text for label, text in shown}
    return pd.DataFrame(columns).rename_axis("quantity")


def numbers(here) -> dict[str, object]:
    """What the calculator page's prose quotes: what the browser loads, the memory share, this machine."""
    return {"explore_mb": bundle.weight() / 1e6, "explore_zip_kb": len(bundle.zipped()) / 1e3,
            "explore_util_pct": 100 * calculator.UTILISATION,
            "explore_here": f"{here.name}: {here.flops / 1e9:,.0f} GFLOP/s, {here.bandwidth / 1e9:,.0f} GB/s"}

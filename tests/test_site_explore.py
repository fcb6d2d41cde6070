"""The interactive views in the built site, as a reader's browser runs them: Pyodide running llmperf's own
Python, served over HTTP from `_build/html` on this machine, with every other request refused.

For the calculator page and one chapter's interactive figure, the test sets several combinations of inputs
with the page's own controls and checks every number the page shows against `llmperf.explore.views` and
`llmperf.calculator` computed here, in CPython: the same code, so the same floats. It also checks what a
reader needs besides: a label for every control, keys that work, a page that fits 400 px, a clear error for
bad input, and how much the page loads. Run after `make book` (`.ci/run` does); skips with a reason without
Chromium or a built site, as tests/test_site.py does.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading

import pytest

from llmperf import calculator
from llmperf.explore import bundle, views
from tests.test_site import SITE, chromium, skip_or_fail

READY = "div.llmperf-explore[data-state=ready]"
BOOT_MS = 120_000  # Pyodide's first start on a busy 2-core host; a few seconds on a laptop


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    """The built site over HTTP on a free loopback port: its base URL."""
    if not (SITE / "book" / "calculator.html").is_file():
        skip_or_fail("No built site with the calculator: run `make book` first.")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(SITE)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    path = chromium()
    if path is None:
        skip_or_fail("No Chromium on this machine, so the interactive pages are not opened (`.ci/run` installs it).")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def open_page(browser, url: str, width: int = 1280):
    """A page at `url` whose requests outside the site are refused and listed in `page.outside`."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.outside = []
    origin = url.split("/", 3)[:3]

    def route(r):
        if r.request.url.split("/", 3)[:3] == origin or r.request.url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            page.outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.errors = []  # uncaught errors in the interactive views' code (the theme's own are not ours to test)
    page.on("pageerror", lambda e: page.errors.append(str(e)) if "explore" in (e.stack or "") else None)
    page.goto(url, wait_until="load")
    return page


def shown(view) -> dict[str, float]:
    """The exact values the view's table carries (data-value), by name."""
    cells = view.locator("td[data-name]")
    return {cells.nth(i).get_attribute("data-name"): float(cells.nth(i).get_attribute("data-value"))
            for i in range(cells.count())}


def config_of(view) -> dict:
    return json.loads(view.get_attribute("data-config"))


def set_inputs(page, view, inputs: dict) -> None:
    """Set each control as a reader does (a choice in a select, digits typed into a box)."""
    for name, value in inputs.items():
        control = view.locator(f"[name={name}]")
        if control.evaluate("e => e.tagName") == "SELECT":
            control.select_option(str(value))
        else:
            control.fill(str(value))


COMBINATIONS = [
    {"model": "llama-3-70b", "accelerator": "H200 SXM", "devices": "2", "batch": "32", "prompt": "8192",
     "answer": "1", "weight_dtype": "bfloat16", "kv_dtype": "bfloat16"},  # too long for Llama-3's 8k: an error
    {"model": "llama-3-70b", "accelerator": "H200 SXM", "devices": "2", "batch": "32", "prompt": "7000",
     "answer": "1000", "weight_dtype": "bfloat16", "kv_dtype": "fp8"},
    {"model": "llama-3.1-405b", "accelerator": "B200", "devices": "8", "batch": "64", "prompt": "32000",
     "answer": "2000", "weight_dtype": "fp8", "kv_dtype": "fp8"},
    {"model": "smollm2-135m", "accelerator": "L4", "devices": "1", "batch": "1", "prompt": "128", "answer": "64",
     "weight_dtype": "float32", "kv_dtype": "float32"},
    {"model": "mistral-7b", "accelerator": "MI300X", "devices": "1", "batch": "300", "prompt": "2000",
     "answer": "500", "weight_dtype": "bfloat16", "kv_dtype": "bfloat16"},
]


def expected(config: dict, inputs: dict) -> dict[str, float]:
    """What the calculator computes in this process for the same inputs."""
    v = views._read(config, {**views.DEFAULTS, **inputs})
    p = calculator.predict(views.setup(v))
    return {name: float(getattr(p, name)) for name in ("ttft", "tpot", "user_rate", "batch_rate", "e2e",
                                                        "kv_per_sequence", "kv_batch", "weights", "max_batch",
                                                        "intensity")}


def test_the_calculator_shows_the_cost_models_numbers(site, browser):
    page = open_page(browser, site + "book/calculator.html")
    view = page.locator("div.llmperf-explore").first
    page.wait_for_selector(READY, timeout=BOOT_MS)
    config = config_of(view)
    assert shown(view) == expected(config, views.DEFAULTS), "the defaults: Llama-3-8B on an H100 SXM"

    for inputs in COMBINATIONS:
        set_inputs(page, view, inputs)
        if int(inputs["prompt"]) + int(inputs["answer"]) > 8192 and inputs["model"] != "llama-3.1-405b":
            assert "context" in view.locator(".llmperf-explore-error").inner_text()
            assert view.get_attribute("data-state") == "refused"
            continue
        assert view.get_attribute("data-state") == "ready"
        assert shown(view) == expected(config, inputs), inputs

    view.get_by_role("button", name="SmolLM2 on this machine").click()
    scenario = next(s for s in config["scenarios"] if s["label"] == "SmolLM2 on this machine")
    assert shown(view) == expected(config, scenario["inputs"])
    assert page.outside == [] and page.errors == []


def test_the_calculator_refuses_bad_input_clearly(site, browser):
    page = open_page(browser, site + "book/calculator.html")
    view = page.locator("div.llmperf-explore").first
    page.wait_for_selector(READY, timeout=BOOT_MS)
    before = shown(view)
    for value in ("0", "-3", "2.5", ""):
        set_inputs(page, view, {"batch": value})
        error = view.locator(".llmperf-explore-error")
        assert error.get_attribute("role") == "alert" and "Batch size" in error.inner_text(), value
        assert shown(view) == before, "a refused input leaves the last good numbers"
    set_inputs(page, view, {"batch": "4"})
    assert view.locator(".llmperf-explore-error").inner_text() == ""


def test_the_calculator_is_usable_by_keyboard_and_at_400_px(site, browser):
    page = open_page(browser, site + "book/calculator.html", width=400)
    view = page.locator("div.llmperf-explore").first
    page.wait_for_selector(READY, timeout=BOOT_MS)
    unlabelled = page.evaluate("""() => [...document.querySelectorAll('.llmperf-explore select, .llmperf-explore input')]
        .filter(e => !document.querySelector(`label[for="${e.id}"]`)).map(e => e.name)""")
    assert unlabelled == []
    width = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width[0] <= width[1] + 1, f"the page scrolls sideways at 400 px: {width}"

    before = shown(view)
    view.locator("[name=model]").focus()
    page.keyboard.press("ArrowDown")  # the next model, by keyboard alone
    assert view.locator("[name=model]").input_value() != views.DEFAULTS["model"]
    assert shown(view) != before
    view.locator("[name=batch]").focus()
    page.keyboard.press("ArrowUp")  # a number box steps by 1
    assert view.locator("[name=batch]").input_value() == "2"
    assert shown(view) == expected(config_of(view), {
        "model": view.locator("[name=model]").input_value(), "batch": "2"})


def test_the_calculator_loads_what_the_page_says_and_nothing_from_outside(site, browser):
    page = open_page(browser, site + "book/calculator.html")
    view = page.locator("div.llmperf-explore").first
    page.wait_for_selector(READY, timeout=BOOT_MS)
    loaded = page.evaluate("""() => performance.getEntriesByType('resource')
        .filter(e => e.name.includes('/_static/explore/')).reduce((s, e) => s + e.encodedBodySize, 0)""")
    assert loaded == bundle.weight() == pytest.approx(config_of(view)["megabytes"] * 1e6)
    assert "Loaded in" in view.locator(".llmperf-explore-status").inner_text()
    assert page.outside == []


def test_a_chapters_figure_becomes_interactive_on_a_click(site, browser):
    page = open_page(browser, site + "notebooks/03_decode_intensity.html")
    view = page.locator("div.llmperf-explore").first
    config = config_of(view)
    before = shown(view)  # the defaults, computed by the build
    assert before == {k: float(v) for k, v in _values(views.render(config)).items()}
    heavy = "() => performance.getEntriesByType('resource').filter(e => e.name.includes('/_static/explore/')).length"
    assert page.evaluate(heavy) == 0, "nothing heavy loads before the click"
    view.locator("button.llmperf-explore-start").click()
    page.wait_for_selector(READY, timeout=BOOT_MS)
    assert shown(view) == before
    assert view.locator(".llmperf-explore-figure .scatterlayer .trace").count() == 5  # roof, 3 points, measured

    inputs = {}
    for change in ({"accelerator": "H100 SXM", "batch": "64", "context": "4096", "model": "llama-3-8b"},
                   {"accelerator": "RTX 4090", "batch": "512", "context": "100", "weight_dtype": "fp8"}):
        set_inputs(page, view, change)
        inputs.update(change)  # the page keeps the earlier choices
        assert shown(view) == {k: float(v) for k, v in _values(views.render(config, inputs)).items()}, inputs
    assert page.outside == [] and page.errors == []


def _values(result: dict) -> dict[str, str]:
    import re

    return dict(re.findall(r'data-name="([^"]+)" data-value="([^"]+)"', result["html"]))

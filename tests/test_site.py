"""The built site as a reader's browser shows it: every page, in headless Chromium, offline.

Run after `make book` (`.ci/run` builds the site first, then runs the tests). For
every page of `_build/html` it checks that

- the page fetches nothing from outside the site (every other request is
  refused and counted), so it reads the same offline;
- every equation was typeset by MathJax (served from the site itself: see
  book/_ext/offline_mathjax.py), with no TeX error, and no raw `\\[`, `$$` or
  unresolved `{glue` text is left in the prose;
- every image loaded;
- no code cell's output is an error;
- every solution is closed when the page opens and opens on a click;
- each chapter shows its tables as HTML tables (DataFrames), as many as it has
  (`TABLES`), not as monospace text printed by hand, in the site's table style
  (padding, numbers right-aligned);
- it reads as a book: no progress bar or stderr in any output, computed text in
  the body's weight, no code cell that scrolls sideways at 1280 px, and every
  chapter figure numbered and captioned;

and saves a full-page screenshot to `_build/screenshots/`. Playwright drives the
system's Chromium (Debian: `apt-get install chromium`); without it, or without a
built site, the tests skip and say what to do.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

SITE = Path(__file__).resolve().parents[1] / "_build" / "html"
SHOTS = SITE.parent / "screenshots"
SKIP_PAGES = {"genindex.html", "search.html"}  # Sphinx's generated index and search pages: no content of ours


# The HTML tables in each chapter's cell outputs: every table a chapter shows is a DataFrame (or its Styler),
# which MyST-NB renders as a real table.
TABLES = {  # 5 and 6: the GPU box's table too; 1, 3 and 6: an interactive figure's defaults (llmperf.explore)
    "01_dependency_chain": 8,
    "02_prefill_cost": 6,
    "03_decode_intensity": 12,
    "04_naive_vs_cached": 8,
    "05_step_anatomy": 13,  # with the compiled step against its NumPy code (or why not)
    "06_metrics": 18,
    "reference_runs": 7,
    "errata": 1,
    "calculator": 2,  # the calculator's defaults and the two starting points side by side
}


def is_redirect(page: Path) -> bool:
    return 'http-equiv="Refresh"' in page.read_text(encoding="utf-8")[:2000]


def site_pages() -> list[Path]:
    """Every content page of the built site (the root index.html only redirects to the first page)."""
    if not SITE.is_dir():
        return []
    return sorted(p for p in SITE.rglob("*.html") if p.name not in SKIP_PAGES and not is_redirect(p)
                  and not {"_static", "_sources", "_images"} & set(p.parts))


def chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


REQUIRED = os.environ.get("LLMPERF_REQUIRE_SITE_TEST") == "1"  # .ci/run: fail, never skip, if it cannot run


def skip_or_fail(reason: str):
    if REQUIRED:
        pytest.fail(f"{reason} (LLMPERF_REQUIRE_SITE_TEST=1: the site test must run here)")
    pytest.skip(reason)


def test_the_site_is_there_to_check():
    """Says why the page checks skip, when they do; fails if a built site has lost a chapter."""
    if not SITE.is_dir():
        skip_or_fail(f"No built site at {SITE}: run `make book` first (`.ci/run` does), then the tests.")
    names = {p.relative_to(SITE).as_posix() for p in site_pages()}
    chapters = {f"notebooks/{p.stem}.html" for p in (SITE.parents[1] / "notebooks").glob("*.ipynb")}
    assert chapters <= names, sorted(chapters - names)
    index = (SITE / "index.html").read_text(encoding="utf-8")
    target = index.split('url=', 1)[1].split('"', 1)[0] if is_redirect(SITE / "index.html") else "index.html"
    assert (SITE / target).is_file(), f"index.html leads to {target}, which is not in the site"


@pytest.fixture(scope="module")
def browser():
    path = chromium()
    if path is None:
        skip_or_fail("No Chromium on this machine, so the site's pages are not opened. On Debian or Ubuntu: "
                     "`sudo apt-get install chromium` (`.ci/run` installs it).")
    try:
        from playwright import sync_api
    except ImportError:
        skip_or_fail("Playwright is not installed; it is in requirements.txt: run `make test`.")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


# JavaScript run in each page. Outside code blocks: the text a reader sees.
PROSE = """() => {
  const article = (document.querySelector('article') || document.body).cloneNode(true);
  article.querySelectorAll('pre, code, script, style, mjx-container').forEach(e => e.remove());
  return article.textContent;
}"""
MATH = """() => ({
  math: document.querySelectorAll('.math').length,
  typeset: [...document.querySelectorAll('.math')].filter(e => e.querySelector('mjx-container')).length,
  errors: document.querySelectorAll('mjx-merror').length,
})"""
IMAGES = """async () => {
  const images = [...document.images];
  images.forEach(i => { i.loading = 'eager'; });
  await Promise.all(images.map(i => i.complete ? null : new Promise(r => { i.onload = i.onerror = r; })));
  return images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'));
}"""


# The page as a book: what a reader must not see, and the style a reader must see.
BOOK = """() => {
  const weight = e => parseInt(getComputedStyle(e).fontWeight, 10);
  const inCode = e => e.closest('pre, code, .cell_input');
  return {
    progress: [...document.querySelectorAll('.cell_output')].map(e => e.textContent)
      .filter(t => /\\d+\\/\\d+ \\[\\d+:\\d+|it\\/s\\]|s\\/it\\]/.test(t)).map(t => t.slice(0, 120)),
    stderr: document.querySelectorAll('.cell_output .output.stderr').length,
    bold: [...document.querySelectorAll('span.pasted-text, span.pasted-inline, p > span.output')]
      .filter(e => !inCode(e) && weight(e) > weight(e.parentElement)).map(e => e.textContent.slice(0, 80)),
    wide: [...document.querySelectorAll('div.cell_input pre, div.cell_output pre')]
      .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent.slice(0, 80)),
    unpadded: [...document.querySelectorAll('.cell_output table td')]
      .filter(e => parseFloat(getComputedStyle(e).paddingLeft) < 4).length,
    leftNumbers: [...document.querySelectorAll('.cell_output table td.llmperf-number')]
      .filter(e => getComputedStyle(e).textAlign !== 'right').length,
    uncaptioned: [...document.querySelectorAll('.cell_output img')]
      .filter(i => { const f = i.closest('figure'); const c = f && f.querySelector('figcaption');
                     return !(c && /Fig/.test(c.textContent)); }).map(i => i.getAttribute('src')),
  };
}"""


LINKS = """() => [...document.querySelectorAll('a[href]')].map(a => a.href).filter(h => h.startsWith('file:'))"""


@pytest.mark.parametrize("page_path", site_pages(), ids=lambda p: p.relative_to(SITE).as_posix())
def test_a_page_reads_right_offline(browser, page_path):
    outside: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 900})

    def route(r):
        if r.request.url.startswith(("file:", "data:", "blob:")):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    try:
        page.goto(page_path.as_uri(), wait_until="load")
        page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
        assert outside == [], f"the page asked for {outside}: it must read the same offline"

        math = page.evaluate(MATH)
        assert math["typeset"] == math["math"] and math["errors"] == 0, math
        prose = page.evaluate(PROSE)
        for raw in ("\\[", "\\(", "$$", "{glue"):
            assert raw not in prose, f"untypeset {raw!r} in the text: ...{prose[prose.find(raw) - 80:][:200]}..."

        assert page.evaluate(IMAGES) == [], "images that did not load"
        broken = {url for url in page.evaluate(LINKS) if not Path(unquote(urlparse(url).path)).exists()}
        assert not broken, f"links to files the site does not have (downloads, pages): {sorted(broken)}"
        if page_path.stem in TABLES:
            tables = page.locator(".cell_output table").count()
            assert tables == TABLES[page_path.stem], f"{tables} tables in the cell outputs, expected {TABLES[page_path.stem]}"
        book = page.evaluate(BOOK)
        assert book["progress"] == [] and book["stderr"] == 0, f"progress bars or stderr on the page: {book}"
        assert book["bold"] == [], f"computed text in bold: {book['bold'][:3]}"
        assert book["wide"] == [], f"code that scrolls sideways at 1280 px: {book['wide'][:3]}"
        assert book["unpadded"] == 0 and book["leftNumbers"] == 0, "tables without the site's table style"
        if page_path.parent.name == "notebooks":
            assert book["uncaptioned"] == [], f"figures without a number and a caption: {book['uncaptioned']}"
        errors = page.locator(".cell_output .output.traceback, .cell_output .output.error")
        assert errors.count() == 0, errors.first.inner_text()[:500]

        solutions = page.locator(".solution.dropdown")
        for i in range(solutions.count()):
            solution = solutions.nth(i)
            body = solution.locator("section").first
            assert not body.is_visible(), f"solution {i + 1} is open when the page loads"
            solution.locator(".admonition-title").click()
            body.wait_for(state="visible", timeout=5000)
        if solutions.count():  # close them again for the screenshot, as a reader first sees the page
            for i in range(solutions.count()):
                solutions.nth(i).locator(".admonition-title").click()

        SHOTS.mkdir(parents=True, exist_ok=True)
        name = page_path.relative_to(SITE).with_suffix(".png").as_posix().replace("/", "__")
        page.screenshot(path=str(SHOTS / name), full_page=True)
    finally:
        page.close()

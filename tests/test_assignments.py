"""The assignments grade as a course needs them to (assignments/, book/assignments.md).

For every master notebook, Otter Assign makes the student and autograder
versions, and `otter run` grades three submissions, each run from the top in a
fresh kernel, its score read from the results.json Otter writes (never from its
exit status, which is 0 even at zero marks):

- the reference solution scores full marks, hidden tests included;
- the untouched student starter scores zero, and the grader still reports every
  question;
- a planted mistake, one realistic error in the solution, fails exactly the test
  case written to catch it and loses exactly that case's points.

It also checks what a student receives: no hidden test and no solution line in
the student folder, and feedback that says what was expected and what came back
rather than a traceback.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ROOT / "assignments"


sys.path.insert(0, str(ASSIGNMENTS))  # the two scripts, which import each other as siblings
import grade as grading  # noqa: E402
import make_assignments as build  # noqa: E402


@dataclass(frozen=True)
class Plant:
    """A realistic mistake planted in the reference solution: `old` replaced by `new` in the solution notebook,
    which the test case `breaks` (its question's name and number, as Otter reports it) must catch, alone."""

    why: str
    old: str
    new: str
    breaks: str
    says: str = ""  # a pattern the failed case's feedback must match: it names what went wrong


PLANTS = {
    "a1_decode_arithmetic": Plant(
        why="the quoted intensity computed from the exact FLOPs instead of 2·N (1.00, not 1.07)",
        old="quoted_intensity = (2 * llama.num_params() + attention_flops)",
        new="quoted_intensity = (decode_flops(llama, context=1))",
        breaks="q3 - 3"),
    "a3_trace_metrics": Plant(
        why="output throughput counting the tokens of a request that failed halfway",
        old="output_tokens = sum(n_tokens(r) for r in done)",
        new="output_tokens = sum(n_tokens(r) for r in requests)",
        breaks="q3 - 2"),
    "a2_kv_cache": Plant(
        why="an off-by-one overflow check that lets position `capacity` through",
        old="    if last >= self.capacity:",
        new="    if last > self.capacity:",
        breaks="q3 - 2"),
    "a4_faster_decode": Plant(
        why="rotary tables cut at 64 positions: right on short generations, wrong past position 64",
        old="    cos_table, sin_table = model.rope_cos, model.rope_sin",
        new="    cos_table, sin_table = model.rope_cos[:64], model.rope_sin[:64]",
        breaks="q1 - 3"),
    "a5_speculative_decoding": Plant(
        why="the model's own token after the accepted drafts counted as accepted: the same tokens and passes, "
            "every pass's accepted count one too many",
        old="        passes.append((len(guess), accepted))",
        new="        passes.append((len(guess), accepted + 1))",
        breaks="q2 - 3"),
    "a6_block_manager": Plant(
        why="free that lets go of a block only when its count is 1, so a shared block never loses the reference "
            "of the table that freed it: it leaks, never free again",
        old="        self.ref_counts[block] -= 1\n        if self.ref_counts[block] == 0:",
        new="        if self.ref_counts[block] == 1:  # a shared block stays with its other tables\n"
            "            self.ref_counts[block] = 0",
        breaks="q3 - 5",
        says=r"call \d+: free\('r\d+'\): block \d+ is held by 1 table \['r\d+'\]: expected its reference count "
             r"to be 1, got 2"),
}


def test_every_assignment_has_a_plant():
    assert sorted(PLANTS) == sorted(build.masters()), "each master needs a planted mistake in PLANTS"


def _cases(autograder: Path) -> dict[str, tuple[float, bool]]:
    """(points, hidden) of every test case by Otter's name for it ("q3 - 2"), hidden ones included."""
    from otter.test_files import ExceptionTestFile

    cases = {}
    for path in sorted((autograder / "tests").glob("*.py")):
        for case in ExceptionTestFile.from_file(str(path)).test_cases:
            cases[case.name] = (float(case.points), case.hidden)
    return cases


@dataclass
class Graded:
    result: Path
    cases: dict[str, tuple[float, bool]]
    reference: object
    starter: object
    planted: object


@pytest.fixture(scope="module", params=sorted(PLANTS))
def graded(request, tmp_path_factory) -> Graded:
    name = request.param
    out = tmp_path_factory.mktemp(name)
    # `make book`'s build where it was made from this master (CI builds the book first), else one of our own; the
    # graded runs below are the test of the solution
    result = build.built(name, ROOT / "_build" / "assignments") or build.assign(name, out, run_tests=False)
    autograder = build.autograder_zip(result)
    solution = result / "autograder" / f"{name}.ipynb"
    starter = result / "student" / f"{name}.ipynb"

    plant = PLANTS[name]
    nb = json.loads(solution.read_text())
    hits = sum("".join(c["source"]).count(plant.old) for c in nb["cells"])
    assert hits == 1, f"the planted mistake's text must occur once in the solution notebook, found {hits}"
    for c in nb["cells"]:
        c["source"] = "".join(c["source"]).replace(plant.old, plant.new)
    planted = out / "planted" / f"{name}.ipynb"
    planted.parent.mkdir()
    planted.write_text(json.dumps(nb))

    # The three gradings are three `otter run` processes, each mostly a kernel starting and importing: run at once
    with ThreadPoolExecutor(3) as pool:
        graded = pool.map(lambda submission, folder: grading.grade(autograder, submission, out / folder),
                          (solution, starter, planted), ("graded_reference", "graded_starter", "graded_planted"))
        return Graded(result, _cases(result / "autograder"), *graded)


def test_reference_solution_scores_full_marks(graded):
    g = graded.reference
    assert g.failed_cases == [], f"the reference solution fails {g.failed_cases}:\n{g.feedback}"
    assert g.score == g.max_score == sum(p for p, _ in graded.cases.values()) > 0


def test_starter_scores_zero_and_every_question_is_reported(graded):
    g = graded.starter
    questions = {case.rsplit(" - ", 1)[0] for case in graded.cases}
    assert set(g.by_question) == questions, "the grader must report every question, even for an empty starter"
    assert g.score == 0, f"the untouched starter scored {g.score}: some test passes without an answer"
    assert sorted(g.failed_cases) == sorted(graded.cases), "every test case must fail on the starter"


def test_planted_mistake_loses_exactly_its_test(graded, request):
    plant = PLANTS[request.node.callspec.params["graded"]]
    g = graded.planted
    assert g.failed_cases == [plant.breaks], (
        f"planted mistake ({plant.why}): expected only {plant.breaks} to fail, got {g.failed_cases}")
    assert g.score == g.max_score - graded.cases[plant.breaks][0]
    feedback = " ".join(g.feedback[plant.breaks.split(" - ")[0]].split())
    assert re.search(plant.says, feedback), f"the feedback on {plant.breaks} should match {plant.says!r}:\n{feedback}"


def test_feedback_says_what_was_expected(graded):
    for question, text in graded.starter.feedback.items():
        assert "Traceback" not in text, f"{question}'s feedback shows a traceback:\n{text}"
        failures = re.findall(r"❌ Test case failed\n(.*?)(?=\n\s*\S+ - \d+ result:|\Z)", text, re.S)
        assert failures, f"no failure message for {question}:\n{text}"
        for failure in failures:
            assert "expected" in failure.lower(), f"{question}: a failure without an expected value:\n{failure}"


def test_student_version_hides_the_hidden_tests_and_the_solutions(graded):
    student = graded.result / "student"
    shipped = "\n".join(p.read_text() for p in student.rglob("*") if p.suffix in (".py", ".ipynb"))
    hidden = re.findall(r"@test_case\(points=[\d.]+, hidden=True\)\ndef (\w+)",
                        "\n".join(p.read_text() for p in (graded.result / "autograder" / "tests").glob("*.py")))
    assert hidden, "every assignment keeps some tests hidden"
    for function in hidden:
        assert function not in shipped, f"the hidden test {function} is in the student version"

    master = json.loads((ASSIGNMENTS / graded.result.name / f"{graded.result.name}.ipynb").read_text())
    solution, given = set(), set()  # code lines inside the solutions, and everywhere else in the master
    for c in master["cells"]:
        if c["cell_type"] != "code":
            continue
        inside = False
        for line in "".join(c["source"]).splitlines():
            text = line.strip()
            if text == "# END SOLUTION":
                inside = False
            elif text.startswith("# BEGIN SOLUTION"):
                inside = True
            elif text.endswith("# SOLUTION"):
                code = text.rsplit("#", 1)[0].strip()
                assignment = re.match(r"[\w.\[\]\"']+\s*=\s*(.+)", code)
                solution.add(assignment.group(1) if assignment else code)  # what Otter replaces with `...`
            elif len(text) > 15:
                (solution if inside else given).add(text)
    assert solution
    student_nb = (student / f"{graded.result.name}.ipynb").read_text()
    leaked = [line for line in solution - given if json.dumps(line)[1:-1] in student_nb]
    assert not leaked, f"solution lines in the student notebook: {leaked}"


def test_book_page_states_each_assignments_points(graded):
    """book/assignments.md gives each assignment's points and how many are hidden: the autograder's own."""
    page = (ROOT / "book" / "assignments.md").read_text()
    section = page.split(f"downloads/{graded.result.name}.zip")[0].rsplit("\n## ", 1)[-1]
    stated = re.search(r"There\s+are\s+(\d+)\s+points,\s+(\d+)\s+of\s+them", section)
    assert stated, f"book/assignments.md states no points for {graded.result.name}"
    total = sum(p for p, _ in graded.cases.values())
    hidden = sum(p for p, h in graded.cases.values() if h)
    assert (int(stated[1]), int(stated[2])) == (total, hidden), (
        f"book/assignments.md says {stated[1]} points, {stated[2]} hidden; the autograder has {total:g}, {hidden:g}")


# --- the scripts' errors, raised before any grading ---------------------------------------------

def test_grade_refuses_bad_input(tmp_path, capsys):
    built = tmp_path / "built"
    notebook = tmp_path / "sub.ipynb"
    notebook.write_text("{}")
    for argv, message in (
            (["no_such_assignment", str(notebook)], "no assignment named no_such_assignment"),
            (["a1_decode_arithmetic", str(notebook), "--built", str(built)], "Run `make assignments` first"),
    ):
        with pytest.raises(SystemExit):
            grading.main(argv)
        assert message in capsys.readouterr().err
    with pytest.raises(ValueError, match="neither a notebook"):
        grading.grade(tmp_path / "x.zip", tmp_path / "answers.txt", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="No submission at"):
        grading.grade(tmp_path / "x.zip", tmp_path / "missing.ipynb", tmp_path / "out")


def test_grade_refuses_a_missing_submission(tmp_path, capsys):
    folder = tmp_path / "built" / "a1_decode_arithmetic" / "autograder"
    folder.mkdir(parents=True)
    (folder / "a1_decode_arithmetic-autograder_1.zip").write_bytes(b"")
    with pytest.raises(SystemExit):
        grading.main(["a1_decode_arithmetic", str(tmp_path / "nope.ipynb"), "--built", str(tmp_path / "built")])
    assert "no such submission" in capsys.readouterr().err


def test_make_assignments_refuses_an_unknown_name(capsys):
    with pytest.raises(SystemExit):
        build.main(["a9_nothing"])
    assert "no assignment named a9_nothing" in capsys.readouterr().err


def test_an_earlier_build_is_used_only_where_it_was_made_from_the_master_as_it_is(tmp_path):
    name = "a1_decode_arithmetic"
    assert build.built(name, tmp_path) is None  # nothing built
    (tmp_path / name).mkdir()
    (tmp_path / name / build.STAMP).write_text(build.source_digest(name))
    assert build.built(name, tmp_path) == tmp_path / name
    (tmp_path / name / build.STAMP).write_text("0" * 64)  # made from another version of the master
    assert build.built(name, tmp_path) is None
    assert build.source_digest(name) != build.source_digest("a2_kv_cache")

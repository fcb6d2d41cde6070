"""The student edition: with `hide_solutions: true`, drop the exercises' answer cells too.

sphinx-exercise's `hide_solutions` removes every {solution} block from the site.
The numbers in those solutions are computed by code cells tagged `hide-cell`
(collapsed on the site; every chapter uses that tag for its exercises' answer
cell and for nothing else), which would still show how each answer is reached.
This extension removes those cells as well, once a page is parsed, whenever
`hide_solutions` is on. The exercises' own givens are glued from the same cells;
glue is resolved while the page is parsed, so the statements keep their numbers.

`make student` builds this edition into _build/student (see book/instructors.md).
Loaded through `sphinx: local_extensions` in _config.yml.
"""

from __future__ import annotations

from docutils import nodes

ANSWER_TAG = "tag_hide-cell"  # the CSS class MyST-NB gives a cell tagged hide-cell


def drop_answer_cells(app, doctree) -> None:
    if not getattr(app.config, "hide_solutions", False):
        return
    for cell in list(doctree.findall(nodes.container)):
        if ANSWER_TAG in cell.get("classes", []):
            cell.parent.remove(cell)


def setup(app):
    app.connect("doctree-read", drop_answer_cells)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

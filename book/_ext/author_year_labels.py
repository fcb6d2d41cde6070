"""Label the bibliography's entries with the author-year text of their citations.

sphinxcontrib-bibtex's default pybtex style, alpha, labels an entry "[ALB+25]".
This extension registers a pybtex formatting style, `author_year_labels`:
alpha's entry format and author-year-title order, with each label built by the
templates of the author-year citation (its parenthetical role's names and
separator): "Allal et al., 2025". Two entries with the same label get "a", "b",
... after the year. With `bibtex_reference_style: label`, {cite:p}`key` then
shows the entry's own label, "[Allal et al., 2025]" or "[vLLM Project, 2025b]",
so a citation and its entry always read the same.

Loaded through `sphinx: local_extensions` in _config.yml and selected there
with `bibtex_default_style: author_year_labels`.
"""

from __future__ import annotations

from collections import Counter

import pybtex.plugin
from pybtex.style.formatting.alpha import Style as AlphaStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting.author_year_title import SortingStyle as AuthorYearTitleSorting
from sphinxcontrib.bibtex.plugin import find_plugin
from sphinxcontrib.bibtex.style.template import join, year

LABEL_TEMPLATE_STYLE = "author_year"  # the referencing style whose citation text the labels copy


class AuthorYearLabelStyle(BaseLabelStyle):
    """Labels such as "Allal et al., 2025": what {cite:p} shows, without brackets."""

    def format_labels(self, sorted_entries):
        style = find_plugin("sphinxcontrib.bibtex.style.referencing", LABEL_TEMPLATE_STYLE)()
        parenthetical = style.role_style["p"]  # the style behind {cite:p}
        template = join(sep=parenthetical.author_year_sep)[
            parenthetical.person.author_or_editor_or_title(full=False), year]
        labels = [template.format_data({"entry": e, "style": parenthetical}).render_as("text") for e in sorted_entries]
        count, seen = Counter(labels), Counter()
        for label in labels:
            if count[label] == 1:
                yield label
            else:
                yield label + "abcdefghijklmnopqrstuvwxyz"[seen[label]]
                seen[label] += 1


class AuthorYearSorting(AuthorYearTitleSorting):
    """Sort by author, year, title, ignoring the braces of a name such as {PyTorch Team}.

    (Sorted with its brace, such a name would come after every letter.)
    """

    def person_key(self, person):
        return super().person_key(person).replace("{", "").replace("}", "")


class AuthorYearStyle(AlphaStyle):
    """pybtex's alpha entry format, sorted by author, year and title, with author-year labels."""

    default_sorting_style = AuthorYearSorting
    default_label_style = AuthorYearLabelStyle


def setup(app):
    pybtex.plugin.register_plugin("pybtex.style.formatting", "author_year_labels", AuthorYearStyle, force=True)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

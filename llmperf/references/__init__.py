"""Reference runs, as read: the chapters' results from other machines (a GPU above all), shown beside this one's.

The site is built wherever `make book` runs, often a CPU, but the course is about
GPUs. So every chapter's experiments can also run as a plain program on any
machine (`python -m llmperf.reference`, the package above the chapters), which
writes one small JSON file; the committed files in `references/` are shown in
every chapter beside "this machine": a column of its comparison table, a series
on its figures, and sentences chosen from their numbers.

This package is what the chapters and the figures read, and imports none of
them, nor torch:

    fileformat  the file: its schema, checked on load; save; merge of a partial run
    results     each chapter's key results, from its records; the table rows and figure series
    compare     the committed references, and a chapter's table, series and sentences beside this machine
    sentences   the sentence about each reference, chosen from its numbers
"""

from .fileformat import CHAPTERS, VERSION, ReferenceFileError, ReferenceMergeError, load, merge, save

__all__ = ["CHAPTERS", "VERSION", "ReferenceFileError", "ReferenceMergeError", "load", "merge", "save"]

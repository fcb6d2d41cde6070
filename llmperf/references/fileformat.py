"""The reference file: one JSON document per machine, checked whenever it is read.

    {"format": "llmperf-reference", "version": 1,
     "device": {"type": "cuda", "name": "NVIDIA H200"},
     "probes": {"date": ..., "environment": {...}, "values": {"read_bandwidth": 4.2e12, ...}},
     "chapters": {"chain": {"date": ..., "environment": {...}, "weights": "...", "sizes": {...},
                            "cut": {...}, "seconds": 31.0, "results": {...}, "records": {...}}, ...}}

`results` are the few numbers and series a chapter shows beside this machine's
(`references.results`); `records` are the chapter's whole result records
(`dataclasses.asdict`), kept so that a later chapter can show more of the same
run. Each chapter keeps its own environment and date: a partial run
(`--chapters`) replaces the chapters it ran and keeps the rest, and it is
refused if the file was written on another device, because one file describes
one machine.

A file written by an older llmperf still loads: a chapter shows what it has and
says "not in this reference" for what it lacks. A file that is not this format,
or is newer than this llmperf, is refused with an error that names it. No torch.
"""

from __future__ import annotations

import math
from pathlib import Path

from .. import jsonfile

FORMAT = "llmperf-reference"
VERSION = 1  # raise on any change an older reader would misread; adding a result or a record is not one
CHAPTERS = ("chain", "prefill", "intensity", "caching", "anatomy", "serving")  # the book's order
ENTRY_FIELDS = {"date": str, "environment": dict, "weights": str, "results": dict, "records": dict}


class ReferenceFileError(ValueError):
    """A reference file that cannot be read: the message names the file and what is wrong with it."""


class ReferenceMergeError(ValueError):
    """A run that may not be merged into an existing file (another device's)."""


def empty(device_type: str, device_name: str) -> dict:
    """A reference with no probes and no chapters yet, for one device."""
    return {"format": FORMAT, "version": VERSION, "device": {"type": device_type, "name": device_name},
            "probes": None, "chapters": {}}


def _fail(path, what: str):
    raise ReferenceFileError(f"{path}: {what}. A reference is written by `python -m llmperf.reference --out FILE`; "
                             "rerun it, or remove the file.")


def validate(data, path="reference") -> dict:
    """Check `data` (a parsed file) against the format and return it; ReferenceFileError names `path` if not.

    What is checked is what the chapters read: the format and version, the device, and each chapter's date,
    environment, weights, results and records with their types. Chapters this llmperf does not know (a later
    one's) are kept and ignored."""
    jsonfile.check_header(data, path, FORMAT, VERSION, "an llmperf reference", _fail, ReferenceFileError)
    device = data.get("device")
    if not (isinstance(device, dict) and isinstance(device.get("type"), str) and isinstance(device.get("name"), str)):
        _fail(path, '"device" must be {"type": ..., "name": ...}')
    probes = data.get("probes")
    if probes is not None:
        if not (isinstance(probes, dict) and isinstance(probes.get("values"), dict)
                and isinstance(probes.get("date"), str) and isinstance(probes.get("environment", {}), dict)):
            _fail(path, '"probes" must be null or hold "date", "values" and an "environment" object')
        for name, value in probes["values"].items():
            if not _is_number(value):
                _fail(path, f'probe "{name}" must be a number, got {value!r}')
    chapters = data.get("chapters")
    if not isinstance(chapters, dict):
        _fail(path, '"chapters" must be an object, one entry per chapter')
    for name, entry in chapters.items():
        if not isinstance(entry, dict):
            _fail(path, f'chapter "{name}" must be an object')
        for field, kind in ENTRY_FIELDS.items():
            if not isinstance(entry.get(field), kind):
                _fail(path, f'chapter "{name}" needs "{field}" ({kind.__name__}), got {entry.get(field)!r:.80}')
    return data  # a result may be any JSON value: one this llmperf cannot show reads as "not in this reference"


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load(path) -> dict:
    """Read and check one reference file (ReferenceFileError, naming it, if it is missing or malformed)."""
    return validate(jsonfile.read(path, ReferenceFileError), Path(path))


def save(data: dict, path) -> Path:
    """Check `data` and write it to `path` as indented JSON (the parent folder is created)."""
    validate(data, Path(path))
    return jsonfile.write(data, path)


def merge(old: dict, new: dict, path="reference") -> dict:
    """`old` with `new`'s probes and chapters in place of its own; refused if the two are of different devices."""
    if old["device"] != new["device"]:
        raise ReferenceMergeError(
            f"{path} holds a reference of {old['device']['name']} ({old['device']['type']}), and this run is on "
            f"{new['device']['name']} ({new['device']['type']}). One file describes one machine: name another "
            "--out for this one.")
    merged = dict(old, version=VERSION, chapters={**old["chapters"], **new["chapters"]})
    if new.get("probes") is not None:
        merged["probes"] = new["probes"]
    return merged

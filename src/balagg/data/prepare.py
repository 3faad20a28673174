"""Read a source (hub id or local mirror) and write its normalised JSONL.

``prepare`` is the one entry point: open the rows, normalise each with the source's row function,
assign ids (``{prefix}-{row index}``, zero-padded; LiveCodeBench uses its question id), optionally
deduplicate, and write the records atomically. A malformed row -- one the row function refuses, or a
line of a JSON file that cannot be read at all (:mod:`balagg.data.jsonfiles`) -- either stops the run
(``on_bad_row="fail"``: ValueError naming the row id, its file and line, and the reason; nothing
written) or is skipped, counted and listed in the report (``"skip"``). JSON files (a local file, or the
JSON data files of a mirror folder or hub snapshot, chosen as ``datasets`` chooses them) are read by
:mod:`balagg.data.jsonfiles`; parquet, CSV and ``save_to_disk`` folders through ``datasets``.

Math golds are read by the verifier the reward and the evaluation use
(:func:`balagg.evaluation.verify.math_verifier.gold_is_parsable`). A training row whose gold it cannot
parse is a bad row like any other (its group could never be rewarded and would only burn rollouts); a
benchmark row is kept -- evaluation scores it incorrect, as lighteval does, and counts it -- and listed
in the report's ``unparsable_golds``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from balagg.data.fields import BadRow
from balagg.data.jsonfiles import JSON_SUFFIXES, JsonRows, SourceRow
from balagg.evaluation.verify.math_verifier import gold_is_parsable
from balagg.io import write_jsonl
from balagg.data.sources import Source, get_source

log = logging.getLogger(__name__)

ON_BAD_ROW = ("fail", "skip")
_FILE_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}


class BadRowError(ValueError):
    """A malformed row with ``on_bad_row="fail"``."""


@dataclass
class PrepareReport:
    """What ``prepare`` did: rows read, written, dropped by the source's filter, duplicates, bad rows."""

    source: str
    location: str
    out: str
    rows_read: int = 0
    written: int = 0
    filtered: int = 0
    duplicates: int = 0
    bad_rows: list[dict] = field(default_factory=list)  # {"id", "reason"[, "file", "line"]}
    unparsable_golds: list[dict] = field(default_factory=list)  # {"id", "answer"}: benchmark rows kept
    expected_rows: int | None = None

    @property
    def skipped(self) -> int:
        return len(self.bad_rows)

    def to_dict(self) -> dict:
        return asdict(self) | {"skipped": self.skipped}


def bad_rows_summary(report_paths) -> list[str]:
    """One line per prepared file whose report (:class:`PrepareReport`'s JSON) counts skipped bad rows; a
    path that is missing or not such a report says nothing (the workflow's end-of-run summary)."""
    import json

    lines = []
    for path in report_paths:
        try:
            counts = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(counts, dict) and counts.get("skipped"):
            lines.append(f"{counts['out']}: {counts['skipped']} bad row(s) of {counts['rows_read']} skipped "
                         f"(data.on_bad_row: skip); see {path}")
    return lines


def describe_bad_row(bad: dict) -> str:
    """``math500-0001, line 2 of data/math500.jsonl: not valid JSON (...)``: one entry of ``bad_rows``."""
    place = f", line {bad['line']} of {bad['file']}" if bad.get("line") is not None else ""
    return f"{bad['id']}{place}: {bad['reason']}"


class DatasetRows:
    """A ``datasets.Dataset``'s rows as :class:`~balagg.data.jsonfiles.SourceRow` (no lines to name)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self):
        return (SourceRow(row) for row in self.dataset)


def read_source(location: str | os.PathLike, source: Source, split: str | None = None,
                subset: str | None = None) -> JsonRows | DatasetRows:
    """The source's rows, each a :class:`~balagg.data.jsonfiles.SourceRow` (sized, iterable once per pass).

    ``location`` is a data file (.parquet/.jsonl/.json/.csv), a folder saved with ``save_to_disk``,
    a local mirror folder of the hub repository, or a hub id: its snapshot in the hub cache (see
    balagg.hub; the fetch stage puts it there), else a download (needs network). JSON data files are
    read line by line (:class:`~balagg.data.jsonfiles.JsonRows`), everything else through ``datasets``.
    """
    import datasets

    split = split or source.split
    subset = subset if subset is not None else source.subset
    path = Path(location)
    snapshot = _cached_snapshot(location)
    try:
        if snapshot is not None and source.hub_file and str(location) == source.hub_id:
            return _file_rows(snapshot / source.hub_file)
        if snapshot is not None:
            path = snapshot
        if path.is_file():
            return _file_rows(path)
        if path.is_dir():
            if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
                loaded = datasets.load_from_disk(str(path))
                return DatasetRows(loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded)
            folder, name = str(path), subset
            if subset is not None and (path / subset).is_dir() and not (path / "README.md").is_file():
                folder, name = str(path / subset), None
            json_files = _json_data_files(folder, name, split)
            if json_files is not None:
                return JsonRows(json_files)
            return DatasetRows(datasets.load_dataset(folder, name=name, split=split))
        if path.is_absolute() or str(location).startswith("."):
            raise ValueError(f"data source {location} does not exist")
        kwargs = {"data_files": source.hub_file} if source.hub_file and str(location) == source.hub_id else {}
        return DatasetRows(datasets.load_dataset(str(location), name=None if kwargs else subset, split=split,
                                                 **kwargs))
    except ValueError:
        raise
    except Exception as error:  # datasets raises many types (FileNotFoundError, DatasetNotFoundError, ...)
        raise ValueError(f"cannot load {source.name} from {location} (split {split!r}, subset {subset!r}): "
                         f"{type(error).__name__}: {error}") from None


def open_rows(location: str | os.PathLike, source: Source, split: str | None = None,
              subset: str | None = None):
    """The source's rows as dicts (:func:`read_source`); a line that cannot be read raises a ValueError
    naming its file and line (``prepare`` counts such lines instead)."""
    for entry in read_source(location, source, split=split, subset=subset):
        if entry.row is None:
            raise ValueError(f"{source.name}: cannot read {entry.place or 'a row'}: {entry.problem}")
        yield entry.row


def _file_rows(path: Path) -> JsonRows | DatasetRows:
    import datasets

    suffix = path.suffix.lower()
    if suffix in JSON_SUFFIXES:
        return JsonRows([path])
    builder = _FILE_BUILDERS.get(suffix)
    if builder is None:
        raise ValueError(f"{path}: unsupported data file type {path.suffix!r} "
                         f"(use {', '.join(_FILE_BUILDERS)})")
    return DatasetRows(datasets.load_dataset(builder, data_files=str(path), split="train"))


def _json_data_files(folder: str, name: str | None, split: str) -> list[str] | None:
    """The data files of ``split`` in a mirror folder as ``datasets`` resolves them (its README's configs,
    else its file-name conventions), if they are all plain JSON files; else None (read by ``datasets``)."""
    import datasets
    from datasets.packaged_modules.json.json import Json

    builder = datasets.load_dataset_builder(folder, name=name)
    if not isinstance(builder, Json) or builder.config.field is not None:
        return None
    data_files = builder.config.data_files or {}
    files = next((list(f) for s, f in data_files.items() if str(s) == split), None)
    if files is None:
        raise ValueError(f"{folder}: no split {split!r} (splits: {', '.join(str(s) for s in data_files) or 'none'})")
    if not all(Path(f).suffix.lower() in JSON_SUFFIXES for f in files):
        return None
    return files


def _cached_snapshot(location: str | os.PathLike) -> Path | None:
    """A hub id's snapshot folder in the hub cache (what the fetch stage stored), else None."""
    from balagg.hub import is_hub_id, resolve_snapshot

    if not is_hub_id(location):
        return None
    try:
        return resolve_snapshot(str(location), "dataset")
    except ValueError:
        return None


def prepare(name: str, location: str | os.PathLike, out: str | os.PathLike, *, on_bad_row: str = "fail",
            split: str | None = None, subset: str | None = None, role: str | None = None,
            **options) -> PrepareReport:
    """Normalise source ``name`` read from ``location`` into the JSONL ``out``; return the report.

    ``options`` go to the row function (LiveCodeBench: ``window=(start, end)`` ISO dates).
    """
    if on_bad_row not in ON_BAD_ROW:
        raise ValueError(f"on_bad_row must be one of {ON_BAD_ROW}, got {on_bad_row!r}")
    source = get_source(name, role)
    rows = read_source(location, source, split=split, subset=subset)
    report = PrepareReport(source=name, location=str(location), out=str(out),
                           expected_rows=source.expected_rows)
    width = max(4, len(str(max(len(rows) - 1, 0))))
    records, seen, unreadable = [], set(), []
    for index, entry in enumerate(rows):
        report.rows_read += 1
        default_id = f"{source.id_prefix}-{index:0{width}d}"
        row, place = entry.row, {"file": entry.file, "line": entry.line} if entry.line is not None else {}
        if row is None:
            unreadable.append(entry)
            _bad_row(report, on_bad_row, default_id, entry.problem, place)
            continue
        try:
            record = source.normalise(row, **options)
        except BadRow as bad:
            _bad_row(report, on_bad_row, _row_label(row, default_id), bad.reason, place)
            continue
        if record is None:
            report.filtered += 1
            continue
        if source.dedupe:
            key = (record["problem"], str(record["answer"]))
            if key in seen:
                report.duplicates += 1
                continue
            seen.add(key)
        record = _finish(record, source, default_id)
        if source.kind == "math" and not gold_is_parsable(record["answer"]):
            if source.role == "benchmark":
                report.unparsable_golds.append({"id": record["id"], "answer": record["answer"]})
            else:
                _bad_row(report, on_bad_row, _row_label(row, record["id"]),
                         f"gold answer {record['answer']!r} cannot be parsed by the math verifier", place)
                continue
        records.append(record)
    if unreadable and len(unreadable) == report.rows_read:
        first = unreadable[0]
        raise ValueError(f"{name}: no row of {location} can be read ({first.place}: {first.problem})")
    ids = [r["id"] for r in records]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"{name}: duplicate problem id {dup} in the source")
    report.written = write_jsonl(out, records)
    if source.expected_rows is not None and report.written != source.expected_rows:
        log.info("%s: wrote %d records; the full set has %d", name, report.written, source.expected_rows)
    return report


def _bad_row(report: PrepareReport, on_bad_row: str, row_id: str, reason: str, place: dict) -> None:
    """Stop at a bad row (``fail``: BadRowError naming it, its file and line) or count it in the report
    (``skip``). ``place``: ``{"file", "line"}`` of a row read from a JSON file, else empty."""
    bad = {"id": row_id, "reason": reason, **place}
    if on_bad_row == "fail":
        raise BadRowError(f"{report.source}: bad row {describe_bad_row(bad)}")
    log.warning("%s: skipping bad row %s", report.source, describe_bad_row(bad))
    report.bad_rows.append(bad)


def _finish(record: dict, source: Source, default_id: str) -> dict:
    """Put ``id`` (and for benchmarks ``benchmark``, ``kind``) first, as in docs/files.md."""
    head = {"id": record.pop("id", default_id)}
    if source.role == "benchmark":
        head |= {"benchmark": source.name, "kind": source.kind}
    else:
        record.setdefault("source", source.name)
    return head | record


def _row_label(row: dict, default_id: str) -> str:
    for name in ("question_id", "unique_id", "id", "idx"):
        if isinstance(row, dict) and row.get(name) not in (None, ""):
            return f"{default_id} (source id {row[name]})"
    return default_id

"""Read a source (hub id or local mirror) through ``datasets`` and write its normalised JSONL.

``prepare`` is the one entry point: open the rows, normalise each with the source's row function,
assign ids (``{prefix}-{row index}``, zero-padded; LiveCodeBench uses its question id), optionally
deduplicate, and write the records atomically. A malformed row either stops the run
(``on_bad_row="fail"``: ValueError naming the row id and reason, nothing written) or is skipped,
counted and listed in the report (``"skip"``).

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
    bad_rows: list[dict] = field(default_factory=list)  # {"id", "reason"}
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


def open_rows(location: str | os.PathLike, source: Source, split: str | None = None,
              subset: str | None = None):
    """The source's rows as a ``datasets.Dataset``.

    ``location`` is a data file (.parquet/.jsonl/.json/.csv), a folder saved with ``save_to_disk``,
    a local mirror folder of the hub repository, or a hub id: its snapshot in the hub cache (see
    balagg.hub; the fetch stage puts it there), else a download (needs network).
    """
    import datasets

    split = split or source.split
    subset = subset if subset is not None else source.subset
    path = Path(location)
    snapshot = _cached_snapshot(location)
    try:
        if snapshot is not None and source.hub_file and str(location) == source.hub_id:
            return datasets.load_dataset(str(snapshot), data_files=source.hub_file, split="train")
        if snapshot is not None:
            path = snapshot
        if path.is_file():
            builder = _FILE_BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise ValueError(f"{path}: unsupported data file type {path.suffix!r} "
                                 f"(use {', '.join(_FILE_BUILDERS)})")
            return datasets.load_dataset(builder, data_files=str(path), split="train")
        if path.is_dir():
            if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
                loaded = datasets.load_from_disk(str(path))
                return loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded
            if subset is not None and (path / subset).is_dir() and not (path / "README.md").is_file():
                return datasets.load_dataset(str(path / subset), split=split)
            return datasets.load_dataset(str(path), name=subset, split=split)
        if path.is_absolute() or str(location).startswith("."):
            raise ValueError(f"data source {location} does not exist")
        kwargs = {"data_files": source.hub_file} if source.hub_file and str(location) == source.hub_id else {}
        return datasets.load_dataset(str(location), name=None if kwargs else subset, split=split, **kwargs)
    except ValueError:
        raise
    except Exception as error:  # datasets raises many types (FileNotFoundError, DatasetNotFoundError, ...)
        raise ValueError(f"cannot load {source.name} from {location} (split {split!r}, subset {subset!r}): "
                         f"{type(error).__name__}: {error}") from None


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
    dataset = open_rows(location, source, split=split, subset=subset)
    report = PrepareReport(source=name, location=str(location), out=str(out),
                           expected_rows=source.expected_rows)
    width = max(4, len(str(max(len(dataset) - 1, 0))))
    records, seen = [], set()
    for index, row in enumerate(dataset):
        report.rows_read += 1
        default_id = f"{source.id_prefix}-{index:0{width}d}"
        try:
            record = source.normalise(row, **options)
        except BadRow as bad:
            _bad_row(report, on_bad_row, _row_label(row, default_id), bad.reason)
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
                         f"gold answer {record['answer']!r} cannot be parsed by the math verifier")
                continue
        records.append(record)
    ids = [r["id"] for r in records]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"{name}: duplicate problem id {dup} in the source")
    report.written = write_jsonl(out, records)
    if source.expected_rows is not None and report.written != source.expected_rows:
        log.info("%s: wrote %d records; the full set has %d", name, report.written, source.expected_rows)
    return report


def _bad_row(report: PrepareReport, on_bad_row: str, row_id: str, reason: str) -> None:
    """Stop at a bad row (``fail``: BadRowError naming it) or count it in the report (``skip``)."""
    if on_bad_row == "fail":
        raise BadRowError(f"{report.source}: bad row {row_id}: {reason}")
    log.warning("%s: skipping bad row %s: %s", report.source, row_id, reason)
    report.bad_rows.append({"id": row_id, "reason": reason})


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

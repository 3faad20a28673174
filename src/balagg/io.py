"""Atomic file writes and strict JSONL reading: files are the pipeline's source of truth.

Every writer goes through :func:`atomic_path`: the content is written to a temporary file in the
destination folder and renamed over the target, so a reader (or a resumed job) sees either the old file
or the complete new one, never a partial write. JSON is written strictly: NaN and infinities become
``null`` (:func:`json_safe`).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from balagg.errors import with_filename


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (same suffix, so format-sniffing writers work); on success it
    replaces ``path``, on error it is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except OSError as error:  # a failed write() names no file: name the destination (full disk, ...)
        Path(tmp).unlink(missing_ok=True)
        named = with_filename(error, path)
        if named is error:
            raise
        raise named from error
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (and durably: fsync before the rename); return the path."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return Path(path)


def json_safe(value: Any) -> Any:
    """NaN/inf -> None (strict JSON), recursively through dicts, lists and tuples."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def json_line(record: Any) -> str:
    """One strict JSON line (no NaN), newline-terminated."""
    return json.dumps(json_safe(record), ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: str | os.PathLike, data: Any) -> Path:
    """Pretty, key-sorted, strict JSON, written atomically."""
    text = json.dumps(json_safe(data), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
    return atomic_write_text(path, text)


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> int:
    """One JSON object per line, streamed to a temporary file and renamed; returns the number written."""
    count = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json_line(record))
            count += 1
    return count


def parse_json_line(line: str) -> tuple[dict | None, str | None]:
    """``(object, None)`` if one line of JSON Lines holds a JSON object, else ``(None, what is wrong)``."""
    try:
        record = json.loads(line.rstrip("\r\n"))
    except json.JSONDecodeError as error:  # "Unterminated string starting at" + " column 12"
        return None, f"not valid JSON ({error.msg.removesuffix(' at')} at column {error.colno})"
    if not isinstance(record, dict):
        return None, f"expected a JSON object, got {type(record).__name__}"
    return record, None


BAD_LINE_POLICIES = ("raise", "skip", "torn-tail")
"""What :func:`read_jsonl_lines` does with a line that is not a JSON object: ``raise`` a ValueError naming
the file and line (the default: inputs a person or a stage wrote); ``skip`` it, recording its line
number in ``skipped`` (a reader that reports what it left out: the analysis); ``torn-tail``: drop it if
it is the file's last line (an append cut by kill -9: metrics.jsonl), raise anywhere else."""


def read_jsonl_lines(path: str | os.PathLike, *, bad_lines: str = "raise",
                     skipped: list[int] | None = None) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each line of a JSONL file (blank lines skipped); a bad line is
    handled by ``bad_lines`` (:data:`BAD_LINE_POLICIES`)."""
    if bad_lines not in BAD_LINE_POLICIES:
        raise ValueError(f"bad_lines must be one of {BAD_LINE_POLICIES}, got {bad_lines!r}")
    path = Path(path)
    pending = None  # a bad line seen under torn-tail: fine only if nothing follows it
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if pending is not None:
                raise ValueError(pending)
            record, problem = parse_json_line(line)
            if problem is None:
                yield number, record
            elif bad_lines == "raise":
                raise ValueError(f"{path}:{number}: {problem}")
            elif bad_lines == "skip":
                if skipped is not None:
                    skipped.append(number)
            else:
                pending = f"{path}:{number}: {problem} (and not the last line, so not a torn append)"


def read_jsonl(path: str | os.PathLike, *, bad_lines: str = "raise",
               skipped: list[int] | None = None) -> Iterator[dict]:
    """The objects of a JSONL file (:func:`read_jsonl_lines` without the line numbers)."""
    for _, record in read_jsonl_lines(path, bad_lines=bad_lines, skipped=skipped):
        yield record

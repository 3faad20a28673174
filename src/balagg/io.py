"""Atomic file writes and JSONL reading: files are the pipeline's source of truth.

Every writer goes through :func:`atomic_write_text`: the content is written to a temporary file in the
destination folder and renamed over the target, so a reader (or a resumed job) sees either the old file
or the complete new one, never a partial write.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (creating parent folders); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | os.PathLike, data: Any) -> Path:
    """Pretty, key-sorted JSON, written atomically."""
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=True) + "\n")


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> Path:
    """One JSON object per line, written atomically."""
    return atomic_write_text(path, "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))


def read_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """The objects of a JSONL file; a malformed line raises ValueError naming the file and line."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not valid JSON ({error.msg})") from None

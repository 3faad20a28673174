"""The rows of a source's JSON files, read one at a time: a line that cannot be read is a bad row.

``datasets``' JSON builder parses JSON Lines in blocks with pyarrow, so one line cut in half fails the
whole file (a DatasetGenerationError whose message counts rows from 0 and may blame the encoding), and
so does a field whose type changes between rows (an answer written 34 in one row and "34" in the next).
A source's JSON files are read here instead, in the two layouts real benchmark copies come in:

- JSON Lines (``.jsonl``, and ``.json`` files holding one object per line, as some evaluation
  harnesses vendor them): every non-blank line is one row. A line that does not hold a JSON object (cut
  short, not UTF-8, a list) is a row with a ``problem``, numbered like the others. A UTF-8 byte-order
  mark and CRLF line ends are read as a reader means them; lines end at ``\\n`` only, so a raw U+2028
  or U+0085 inside a string stays text.
- A JSON array (a ``.json`` file whose first character is ``[``: the pretty-printed ``.json`` copies of
  MATH-500, AIME, Minerva and OlympiadBench that harnesses vendor): every element is one row, placed at
  the line it starts on. An array is one document: a syntax error anywhere leaves nothing to read
  reliably after it, so the file is refused with a ValueError naming its line and column. A ``.jsonl``
  file is never read as an array: its first line starting with ``[`` is one bad row like any other.

Rows are numbered from 0 in file order (blank lines are not rows; several files follow each other), so a
row keeps its number, and the id prepare-data gives it, whether or not another line is damaged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from balagg.io import parse_json_line

JSON_SUFFIXES = (".jsonl", ".json")
_BOM = b"\xef\xbb\xbf"
_WHITESPACE = " \t\r\n"


@dataclass(frozen=True)
class SourceRow:
    """One row of a source: ``row`` as read, or None with the ``problem`` that made it unreadable.
    ``file`` and ``line`` (1-based) place rows read from JSON files; both are None for other formats."""

    row: dict | None
    problem: str | None = None
    file: str | None = None
    line: int | None = None

    @property
    def place(self) -> str:
        """``line 2 of data/math500.jsonl``, or '' where the format has no lines."""
        return f"line {self.line} of {self.file}" if self.line is not None else ""


class JsonRows:
    """The rows of JSON files (:class:`SourceRow` each), in order; ``len`` counts them without parsing."""

    def __init__(self, files: Sequence[str | os.PathLike]):
        self.files = [Path(f) for f in files]
        self._count: int | None = None

    def __len__(self) -> int:
        if self._count is None:
            self._count = sum(_count_rows(path) for path in self.files)
        return self._count

    def __iter__(self) -> Iterator[SourceRow]:
        for path in self.files:
            yield from (_array_rows(path) if _is_array(path) else _line_rows(path))


def _is_array(path: Path) -> bool:
    """Whether the file is a ``.json`` file whose first character (after a byte-order mark and whitespace)
    is ``[``; a ``.jsonl`` file is JSON Lines whatever its first line holds."""
    if path.suffix.lower() != ".json":
        return False
    with path.open("rb") as handle:
        head = handle.read(1 << 16)
    return head.removeprefix(_BOM).lstrip()[:1] == b"["


def _count_rows(path: Path) -> int:
    if _is_array(path):
        return sum(1 for _ in _array_rows(path))
    with path.open("rb") as handle:
        return sum(1 for number, raw in enumerate(handle, start=1) if _strip_bom(raw, number).strip())


def _strip_bom(raw: bytes, number: int) -> bytes:
    return raw[len(_BOM):] if number == 1 and raw.startswith(_BOM) else raw


def _line_rows(path: Path) -> Iterator[SourceRow]:
    """JSON Lines: one row per non-blank line (binary iteration splits at ``\\n`` only)."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            raw = _strip_bom(raw, number)
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                yield SourceRow(None, f"not UTF-8 (byte {error.start + 1} of the line)", str(path), number)
                continue
            record, problem = parse_json_line(text)
            yield SourceRow(record, problem, str(path), number)


def _array_rows(path: Path) -> Iterator[SourceRow]:
    """A JSON array: one row per element, at the line where the element starts."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: a JSON array file that is not UTF-8 (byte {error.start + 1}); it is read "
                         "whole, so it cannot lose one row") from None
    decoder = json.JSONDecoder()
    counted = [0, 1]  # the line of a position, counted incrementally: [position, its line]

    def line_of(position: int) -> int:
        counted[1] += text.count("\n", counted[0], position)
        counted[0] = position
        return counted[1]

    def skip(position: int) -> int:
        while position < len(text) and text[position] in _WHITESPACE:
            position += 1
        return position

    def refuse(position: int, what: str) -> ValueError:
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        return ValueError(f"{path}: not a valid JSON array at line {line} column {column}: {what}; an array is "
                          "read whole, so one damaged element makes the file unreadable (JSON Lines lose only "
                          "the damaged line)")

    position = skip(0) + 1  # past "["
    position = skip(position)
    if position < len(text) and text[position] == "]":
        end = skip(position + 1)
        if end < len(text):
            raise refuse(end, "extra data after the array")
        return
    while True:
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise refuse(error.pos, error.msg) from None
        line = line_of(position)
        if isinstance(value, dict):
            yield SourceRow(value, None, str(path), line)
        else:
            yield SourceRow(None, f"expected a JSON object, got {type(value).__name__}", str(path), line)
        position = skip(end)
        if position < len(text) and text[position] == ",":
            position = skip(position + 1)
            continue
        if position < len(text) and text[position] == "]":
            end = skip(position + 1)
            if end < len(text):
                raise refuse(end, "extra data after the array")
            return
        raise refuse(position, "expecting ',' or ']' after an element")

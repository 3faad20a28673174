"""Benchmarks and training sets, normalised to the JSONL records of docs/files.md.

``SOURCES`` (in ``balagg.data.sources``) is the registry; ``prepare(name, location, out)`` reads one
source from its hub id or a local mirror and writes its JSONL. ``python -m balagg prepare-data`` is
the command-line front end.
"""

from balagg.data.fields import BadRow, last_boxed
from balagg.io import read_jsonl, write_json, write_jsonl
from balagg.data.prepare import BadRowError, PrepareReport, open_rows, prepare, read_source
from balagg.data.sources import SOURCES, Source, get_source

__all__ = [
    "SOURCES", "BadRow", "BadRowError", "PrepareReport", "Source",
    "get_source", "last_boxed", "open_rows", "prepare", "read_jsonl", "read_source", "write_json", "write_jsonl",
]

"""balagg.io: atomic writes and strict JSON(L), shared by every stage."""

from __future__ import annotations

import json

import pytest

from balagg.io import atomic_path, atomic_write_text, json_safe, read_jsonl, write_json, write_jsonl


def test_undefined_statistics_are_written_as_null(tmp_path):
    assert json_safe({"a": float("nan"), "b": [1.5, float("inf")], "c": ("x",)}) == {"a": None, "b": [1.5, None],
                                                                                      "c": ["x"]}
    write_json(tmp_path / "card.json", {"len_gap": float("nan"), "n": 3})
    assert json.loads((tmp_path / "card.json").read_text()) == {"len_gap": None, "n": 3}


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "sub" / "table.csv"
    atomic_write_text(target, "old\n")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert target.read_text() == "old\n"
    assert [p.name for p in target.parent.iterdir()] == ["table.csv"]


def test_jsonl_round_trip_and_errors_name_the_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    assert write_jsonl(path, ({"i": i, "x": float("nan") if i else "é"} for i in range(3))) == 3
    assert list(read_jsonl(path)) == [{"i": 0, "x": "é"}, {"i": 1, "x": None}, {"i": 2, "x": None}]
    path.write_text('{"i": 0}\n\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"rows.jsonl:3: expected a JSON object"):
        list(read_jsonl(path))
    path.write_text('{"i": 0}\n{oops\n')
    with pytest.raises(ValueError, match=r"rows.jsonl:2: not valid JSON"):
        list(read_jsonl(path))

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


def test_one_reader_three_policies_for_bad_lines(tmp_path):
    """raise (named file and line), skip (recorded), torn-tail (only a bad last line is dropped)."""
    from balagg.io import read_jsonl_lines
    from balagg.train.files import read_metrics

    torn = tmp_path / "metrics.jsonl"
    torn.write_text('{"step": 1}\n\n{"step": 2}\n{"step": 3, "lo')
    assert [r["step"] for r in read_metrics(torn)] == [1, 2]
    with pytest.raises(ValueError, match=r"metrics.jsonl:4: not valid JSON"):
        list(read_jsonl(torn))
    skipped: list[int] = []
    assert [n for n, _ in read_jsonl_lines(torn, bad_lines="skip", skipped=skipped)] == [1, 3]
    assert skipped == [4]

    middle = tmp_path / "middle.jsonl"
    middle.write_text('{"step": 1}\n[1, 2]\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"middle.jsonl:2: expected a JSON object, got list .*not the last line"):
        read_metrics(middle)  # not a torn append: nothing after it is silently lost
    assert [r["step"] for r in read_jsonl(middle, bad_lines="skip")] == [1, 3]
    with pytest.raises(ValueError, match="bad_lines"):
        list(read_jsonl(middle, bad_lines="ignore"))

"""Training rows (balagg.train.data.read_rows): golds normalised, bad rows named."""

from __future__ import annotations

import json

import pytest

from balagg.train.data import read_rows


def write(path, rows):
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def test_rows_carry_their_golds_as_lists_of_strings(tmp_path):
    path = write(tmp_path / "t.jsonl", [{"id": 1, "problem": "1+1?", "answer": 2},
                                        {"id": "b", "problem": "roots?", "answer": ["1", "-1"]}])
    assert read_rows(path) == [{"id": "1", "problem": "1+1?", "answer": ["2"]},
                               {"id": "b", "problem": "roots?", "answer": ["1", "-1"]}]


@pytest.mark.parametrize(("row", "message"), [
    ({"id": "x", "answer": "1"}, "row 2 (id 'x'): missing key 'problem'"),
    ({"id": "x", "problem": "  ", "answer": "1"}, "'problem' must be a non-empty string"),
    ({"id": "x", "problem": "p", "answer": []}, "'answer' must be a string or a non-empty list"),
    ("[1, 2]", "t.jsonl:2: expected a JSON object"),
])
def test_a_bad_row_is_an_error_naming_it(tmp_path, row, message):
    path = write(tmp_path / "t.jsonl", [{"id": "ok", "problem": "p", "answer": "1"}, row])
    with pytest.raises(ValueError) as error:
        read_rows(path)
    assert message in str(error.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="training file .*nope.jsonl does not exist"):
        read_rows(tmp_path / "nope.jsonl")

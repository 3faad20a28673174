"""Source JSON files as real copies come (balagg.data.jsonfiles): one fixture per quirk seen in the
benchmark copies evaluation harnesses vendor (JSON Lines with a final newline, pretty-printed JSON arrays
in ``.json`` files, JSON Lines in ``.json`` files, answers typed differently from row to row) and per way
a file gets damaged (a line cut in half, a download cut short, a multi-byte character cut). An unreadable
line is one bad row with its 1-based line, skipped and counted, fatal only under ``on_bad_row="fail"``."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from balagg.cli import main  # noqa: E402
from balagg.data import BadRowError, prepare, read_jsonl  # noqa: E402
from balagg.tinyworld.warmstart import merge_cards  # noqa: E402


def problem(i: int) -> dict:
    return {"problem": f"Compute ${i} + {i}$.", "answer": str(2 * i), "unique_id": f"test/algebra/{i}.json"}


def jsonl_lines(n: int) -> list[str]:
    return [json.dumps(problem(i)) for i in range(n)]


def test_a_line_cut_in_half_is_skipped_counted_with_its_line_and_fatal_only_when_asked(tmp_path, capsys):
    lines = jsonl_lines(4)
    lines[1] = lines[1][: len(lines[1]) // 2]
    source = tmp_path / "math500.jsonl"
    source.write_text("\n".join(lines) + "\n")
    out, report_path = tmp_path / "bench" / "math500.jsonl", tmp_path / "bench" / "math500.report.json"
    assert main(["prepare-data", "--benchmark", "math500", "--source", str(source), "--on-bad-row", "skip",
                 "--out", str(out), "--report", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["rows_read"] == 4 and report["written"] == 3 and report["skipped"] == 1
    (bad,) = report["bad_rows"]
    assert bad["id"] == "math500-0001" and bad["line"] == 2 and bad["file"] == str(source)
    assert bad["reason"].startswith("not valid JSON (")
    # the other rows keep the ids they have in the undamaged file
    assert [r["id"] for r in read_jsonl(out)] == ["math500-0000", "math500-0002", "math500-0003"]
    assert f"math500-0001, line 2 of {source}: not valid JSON" in capsys.readouterr().err
    card = {"model": "tiny-s", "datasets": {"d": {"accuracy": 0.3, "len_cv": 0.4, "len_right_mean": 1.0,
                                                  "len_wrong_mean": 2.0, "in_regime": True, "wrong_longer": True}}}
    (tmp_path / "card.json").write_text(json.dumps(card))
    merged = merge_cards([tmp_path / "card.json"], tmp_path / "data-card.json", [report_path])
    assert merged["bad_rows"][str(out)]["examples"][0]["line"] == 2  # the data card names the line too
    with pytest.raises(BadRowError, match=rf"^math500: bad row math500-0001, line 2 of {source}: not valid JSON"):
        prepare("math500", source, tmp_path / "strict.jsonl", on_bad_row="fail")
    assert not (tmp_path / "strict.jsonl").exists()
    assert main(["prepare-data", "--benchmark", "math500", "--source", str(source), "--on-bad-row", "fail",
                 "--out", str(tmp_path / "strict.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: math500: bad row math500-0001, line 2 of")


def test_a_download_cut_short_and_a_cut_multibyte_character(tmp_path):
    """The last line without its end (no final newline), and a line whose UTF-8 is cut inside a character."""
    lines = [line.encode() for line in jsonl_lines(3)]
    lines[0] = json.dumps({"problem": "Find $x$ when $x² = 4$ (x ≥ 0).", "answer": "2"}, ensure_ascii=False).encode()
    lines[1] = lines[0][: lines[0].index("²".encode()) + 1] + b'", "answer": "3"}'  # half of "²"
    source = tmp_path / "aime.jsonl"
    source.write_bytes(b"\n".join(lines)[:-10])
    report = prepare("aime24", source, tmp_path / "out.jsonl", on_bad_row="skip")
    assert [(b["line"], b["reason"].split(" (")[0]) for b in report.bad_rows] == [(2, "not UTF-8"), (3, "not valid JSON")]
    assert report.written == 1 and next(read_jsonl(tmp_path / "out.jsonl"))["problem"].endswith("(x ≥ 0).")


def test_byte_order_mark_crlf_blank_lines_and_raw_line_separators_are_read_as_meant(tmp_path):
    """A BOM, CRLF ends, blank lines (and the final newline) are not rows; U+2028 / U+0085 inside a string
    are text, not line ends; line numbers count every physical line."""
    rows = [problem(0), dict(problem(1), problem="Line one\u2028line two\u0085end."), problem(2)]
    text = "\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows[:2]) + "\r\n\r\n" + json.dumps(rows[2]) + "\r\n\n"
    source = tmp_path / "test.jsonl"
    source.write_bytes(b"\xef\xbb\xbf" + text.encode())
    from balagg.data.jsonfiles import JsonRows

    entries = list(JsonRows([source]))
    assert [e.line for e in entries] == [1, 2, 4] and all(e.problem is None for e in entries)
    assert len(JsonRows([source])) == 3
    report = prepare("math500", source, tmp_path / "out.jsonl", on_bad_row="fail")
    assert report.written == 3
    assert [r["problem"] for r in read_jsonl(tmp_path / "out.jsonl")][1] == "Line one\u2028line two\u0085end."


def test_answers_typed_differently_from_row_to_row(tmp_path):
    """An integer answer in one row and a string in the next (AMC-style copies store 27.0): each row is read
    on its own (pyarrow's block reader refuses a column that changes type)."""
    rows = [{"problem": "a", "answer": 27.0}, {"problem": "b", "answer": "033"}, {"problem": "c", "answer": 5}]
    source = tmp_path / "aime.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepare("aime24", source, tmp_path / "out.jsonl", on_bad_row="fail")
    assert [r["answer"] for r in read_jsonl(tmp_path / "out.jsonl")] == ["27", "033", "5"]


def test_a_pretty_printed_json_array_gives_each_element_its_line(tmp_path):
    """The harness layout: a ``.json`` file holding one indented array (no final newline). An element that
    is not an object is a bad row at the line it starts on."""
    elements = [problem(0), ["not", "a", "row"], problem(2)]
    source = tmp_path / "math.json"
    source.write_text(json.dumps(elements, indent=2))
    starts = [n for n, line in enumerate(source.read_text().splitlines(), start=1) if line in ("  {", "  [")]
    report = prepare("math500", source, tmp_path / "out.jsonl", on_bad_row="skip")
    assert report.rows_read == 3 and report.written == 2
    assert report.bad_rows == [{"id": "math500-0001", "reason": "expected a JSON object, got list",
                                "file": str(source), "line": starts[1]}]
    assert [r["id"] for r in read_jsonl(tmp_path / "out.jsonl")] == ["math500-0000", "math500-0002"]


def test_a_damaged_json_array_is_refused_with_its_line_and_column(tmp_path, capsys):
    """An array is one document: nothing after a syntax error can be placed, so the file is refused whole."""
    text = json.dumps([problem(0), problem(1)], indent=2)
    source = tmp_path / "olympiad.json"
    source.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=rf"{source}: not a valid JSON array at line \d+ column \d+"):
        prepare("math500", source, tmp_path / "out.jsonl", on_bad_row="skip")
    assert main(["prepare-data", "--benchmark", "math500", "--source", str(source), "--out",
                 str(tmp_path / "out.jsonl")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("first_line", ["[1, 2]", '[{"a":'])
def test_a_json_lines_file_whose_first_line_is_a_list_loses_only_that_line(tmp_path, first_line):
    """A ``.jsonl`` file is never read as an array: a first line holding a list, or cut short after its
    ``[``, is one bad row at line 1, and the other lines are read."""
    source = tmp_path / "math500.jsonl"
    source.write_text("\n".join([first_line, *jsonl_lines(2)]) + "\n")
    from balagg.data.jsonfiles import JsonRows

    assert len(JsonRows([source])) == 3
    report = prepare("math500", source, tmp_path / "out.jsonl", on_bad_row="skip")
    assert report.rows_read == 3 and report.written == 2
    assert [(b["id"], b["line"], b["file"]) for b in report.bad_rows] == [("math500-0000", 1, str(source))]
    assert [r["id"] for r in read_jsonl(tmp_path / "out.jsonl")] == ["math500-0001", "math500-0002"]


def test_json_lines_in_a_json_file(tmp_path):
    source = tmp_path / "demo.json"
    source.write_text("\n".join(jsonl_lines(2)) + "\n")
    assert prepare("math500", source, tmp_path / "out.jsonl").written == 2


def test_a_mirror_folder_resolves_its_files_as_datasets_does_and_names_the_damaged_one(tmp_path):
    """The hub repository's layout (test.jsonl at the root, the split named by the file): the resolved file
    is read line by line, and the report names it."""
    lines = jsonl_lines(3)
    lines[2] = lines[2][:20]
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / "test.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "mirror" / "train.jsonl").write_text("{}\n")
    report = prepare("math500", tmp_path / "mirror", tmp_path / "out.jsonl", on_bad_row="skip")
    assert report.written == 2
    assert report.bad_rows[0]["file"] == str(tmp_path / "mirror" / "test.jsonl") and report.bad_rows[0]["line"] == 3
    with pytest.raises(ValueError, match="no split 'validation'"):
        prepare("math500", tmp_path / "mirror", tmp_path / "out.jsonl", split="validation")


def test_a_training_set_loses_only_its_unreadable_line(tmp_path):
    rows = [json.dumps({"problem": f"p{i}", "answer": str(i), "difficulty": "3/8"}) for i in range(1, 5)]
    rows[0] = rows[0][:-3]
    source = tmp_path / "polaris.jsonl"
    source.write_text("\n".join(rows) + "\n")
    report = prepare("polaris-53k", source, tmp_path / "train.jsonl", on_bad_row="skip")
    assert report.written == 3 and [(b["id"], b["line"]) for b in report.bad_rows] == [("polaris-0000", 1)]
    with pytest.raises(BadRowError, match="polaris-0000, line 1 of"):
        prepare("polaris-53k", source, tmp_path / "strict.jsonl", on_bad_row="fail")


def test_a_file_with_no_readable_line_is_an_error_not_an_empty_benchmark(tmp_path):
    source = tmp_path / "math500.jsonl"
    source.write_text('{"problem": "a", \n{"problem"\n')
    with pytest.raises(ValueError, match=r"no row of .*math500.jsonl can be read \(line 1 of"):
        prepare("math500", source, tmp_path / "out.jsonl", on_bad_row="skip")

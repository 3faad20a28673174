"""``balagg.data``: each loader reads a small fixture in the source's real schema through the local-path
route of ``datasets`` and writes the normalised JSONL of docs/files.md."""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from balagg.cli import main  # noqa: E402
from balagg.benchmarks import BENCHMARK_KINDS, BENCHMARKS, TRAINING_SETS  # noqa: E402
from balagg.data import SOURCES, BadRowError, last_boxed, prepare, read_jsonl  # noqa: E402
from balagg.data.livecodebench import decode_test_cases  # noqa: E402


def write_parquet(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_jsonl_rows(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def encode_private(tests):
    """LiveCodeBench's encoding: base64(zlib(pickle(json string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


MATH500_ROWS = [
    {"problem": "Compute $1+1$.", "solution": "It is $\\boxed{2}$.", "answer": "2",
     "subject": "Prealgebra", "level": 1, "unique_id": "test/prealgebra/1.json"},
    {"problem": "Simplify $\\frac{2}{4}$.", "solution": "$\\boxed{\\frac{1}{2}}$", "answer": "\\frac{1}{2}",
     "subject": "Algebra", "level": 2, "unique_id": "test/algebra/7.json"},
    {"problem": "What is $3\\cdot 3$?", "solution": "9", "answer": "9",
     "subject": "Prealgebra", "level": 1, "unique_id": "test/prealgebra/9.json"},
]


def test_registry_holds_the_contracts_benchmarks_and_training_sets_in_order():
    assert tuple(name for name, s in SOURCES.items() if s.role == "benchmark") == BENCHMARKS
    assert tuple(name for name, s in SOURCES.items() if s.role == "train") == TRAINING_SETS
    assert {name: SOURCES[name].kind for name in BENCHMARKS} == BENCHMARK_KINDS
    assert SOURCES["olympiadbench"].subset == "OE_TO_maths_en_COMP"


def test_math500_from_a_mirror_folder_of_the_hub_repo(tmp_path):
    # the hub repo layout: test.jsonl at the root; datasets infers the split from the file name
    write_jsonl_rows(tmp_path / "mirror" / "test.jsonl", MATH500_ROWS)
    out = tmp_path / "bench" / "math500.jsonl"
    report = prepare("math500", tmp_path / "mirror", out)
    records = list(read_jsonl(out))
    assert report.written == 3 and report.rows_read == 3 and report.expected_rows == 500
    assert records[1] == {"id": "math500-0001", "benchmark": "math500", "kind": "math",
                          "problem": "Simplify $\\frac{2}{4}$.", "answer": "\\frac{1}{2}",
                          "source_id": "test/algebra/7.json", "subject": "Algebra", "level": 2}
    assert not list(tmp_path.joinpath("bench").glob(".*tmp"))  # atomic write leaves no temp file


@pytest.mark.parametrize("name", ["aime24", "aime25"])
def test_aime_from_parquet_with_integer_answers(tmp_path, name):
    rows = [{"id": 60 + i, "problem": f"AIME problem {i}", "solution": "...", "answer": str(100 + i),
             "url": "https://artofproblemsolving.com", "year": 2024} for i in range(3)]
    rows[2]["answer"] = "033"  # leading zeros kept as written
    out = tmp_path / f"{name}.jsonl"
    prepare(name, write_parquet(tmp_path / "train.parquet", rows), out)
    records = list(read_jsonl(out))
    assert [r["answer"] for r in records] == ["100", "101", "033"]
    assert [r["id"] for r in records] == [f"{name}-0000", f"{name}-0001", f"{name}-0002"]
    assert records[0]["source_id"] == 60


def test_aime25_numeric_answer_column_is_written_as_text(tmp_path):
    rows = [{"problem": "p", "answer": 70}, {"problem": "q", "answer": 588}]
    prepare("aime25", write_parquet(tmp_path / "a.parquet", rows), tmp_path / "o.jsonl")
    assert [r["answer"] for r in read_jsonl(tmp_path / "o.jsonl")] == ["70", "588"]


def test_olympiadbench_keeps_the_answer_list_and_reads_the_subset_folder(tmp_path):
    rows = [
        {"id": 1606, "question": "Find all $n$.", "solution": ["..."], "final_answer": ["$3$", "$5$"],
         "context": None, "image_1": None, "modality": "Text-only", "difficulty": "Competition",
         "is_multiple_answer": True, "unit": None, "answer_type": "Numerical", "error": None,
         "question_type": "Open-ended", "subfield": "Number Theory", "subject": "Math", "language": "English"},
        {"id": 1607, "question": "Compute $x$.", "solution": ["..."], "final_answer": ["2"],
         "context": "Let $x=2$.", "image_1": None, "modality": "Text-only", "difficulty": "Competition",
         "is_multiple_answer": False, "unit": "cm", "answer_type": "Numerical", "error": None,
         "question_type": "Open-ended", "subfield": "Algebra", "subject": "Math", "language": "English"},
    ]
    write_parquet(tmp_path / "mirror" / "OE_TO_maths_en_COMP" / "train-00000-of-00001.parquet", rows)
    out = tmp_path / "ob.jsonl"
    prepare("olympiadbench", tmp_path / "mirror", out)
    first, second = read_jsonl(out)
    assert first["answer"] == ["$3$", "$5$"] and first["is_multiple_answer"] is True
    assert second["problem"] == "Let $x=2$.\n\nCompute $x$." and second["unit"] == "cm"
    assert first["id"] == "olympiadbench-0000" and first["source_id"] == 1606


def test_olympiadbench_answer_that_is_not_a_list_is_a_bad_row(tmp_path):
    rows = [{"id": 1, "question": "q", "final_answer": "2"}]
    with pytest.raises(BadRowError, match=r"olympiadbench-0000 \(source id 1\), line 1 of .*ob.jsonl: final_answer is a str"):
        prepare("olympiadbench", write_jsonl_rows(tmp_path / "ob.jsonl", rows), tmp_path / "o.jsonl")


def test_minerva_gold_is_the_last_boxed_of_the_solution(tmp_path):
    rows = [
        {"problem": "Find the mass.", "solution": "First $\\boxed{1}$, then finally $\\boxed{\\frac{3}{4}}$.",
         "type": "Physical Chemistry", "idx": 0},
        {"problem": "Nested.", "solution": "So $\\boxed{\\sqrt{\\frac{1}{2}}}$ kg", "type": "Astronomy", "idx": 1},
        {"problem": "No answer.", "solution": "We cannot tell.", "type": "Astronomy", "idx": 2},
    ]
    src = write_jsonl_rows(tmp_path / "minerva_math" / "test.jsonl", rows)
    out = tmp_path / "minerva.jsonl"
    with pytest.raises(BadRowError, match=r"minerva-0002 \(source id 2\), line 3 of .*test.jsonl: solution has no \\boxed"):
        prepare("minerva", src, out)
    assert not out.exists()  # fail mode writes nothing
    report = prepare("minerva", src, out, on_bad_row="skip")
    assert report.written == 2 and report.skipped == 1
    assert report.bad_rows == [{"id": "minerva-0002 (source id 2)", "reason": "solution has no \\boxed{} answer",
                                "file": str(src), "line": 3}]
    assert [r["answer"] for r in read_jsonl(out)] == ["\\frac{3}{4}", "\\sqrt{\\frac{1}{2}}"]


@pytest.mark.parametrize("text, gold", [
    ("\\boxed{5}", "5"),
    ("a \\boxed{1} b \\boxed{2}", "2"),
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
    ("\\fbox{7}", "7"),
    ("\\boxed 9$", "9"),
    ("\\boxed{3} then \\boxed{unclosed", "3"),
    ("nothing", None),
])
def test_last_boxed(text, gold):
    assert last_boxed(text) == gold


def lcb_row(question_id, date, private, *, func_name=None, starter="", public=None):
    public = public if public is not None else [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    return {"question_title": f"title {question_id}", "question_content": f"Solve {question_id}.",
            "platform": "atcoder" if func_name is None else "leetcode", "question_id": question_id,
            "contest_id": "abc999", "contest_date": date, "starter_code": starter, "difficulty": "easy",
            "public_test_cases": json.dumps(public), "private_test_cases": private,
            "metadata": json.dumps({"func_name": func_name} if func_name else {})}


def test_livecodebench_window_and_encoded_private_tests(tmp_path):
    hidden = [{"input": "5\n", "output": "6\n", "testtype": "stdin"}]
    functional = [{"input": "[1, 2]", "output": "3", "testtype": "functional"}]
    rows = [
        lcb_row("abc001_a", "2024-07-31T00:00:00", encode_private(hidden)),  # before the window
        lcb_row("abc002_a", "2024-08-01T00:00:00", encode_private(hidden)),  # first day: kept
        lcb_row("3412", "2024-12-15T00:00:00", encode_private(functional), func_name="maxSum",
                starter="class Solution:\n    def maxSum(self, nums):\n        ", public=functional),
        lcb_row("abc003_a", "2025-02-01T00:00:00", json.dumps(hidden)),  # last day, plain JSON: kept
        lcb_row("abc004_a", "2025-02-02T00:00:00", encode_private(hidden)),  # after the window
    ]
    out = tmp_path / "lcb.jsonl"
    report = prepare("livecodebench", write_parquet(tmp_path / "test.parquet", rows), out)
    records = list(read_jsonl(out))
    assert report.filtered == 2 and report.written == 3
    assert [r["id"] for r in records] == ["livecodebench-abc002_a", "livecodebench-3412", "livecodebench-abc003_a"]
    assert records[0]["tests"] == [{"input": "1\n", "output": "2\n", "testtype": "stdin"}] + hidden
    assert records[0]["fn_name"] is None and records[0]["kind"] == "code"
    assert records[1]["fn_name"] == "maxSum" and records[1]["starter_code"].startswith("class Solution")
    assert records[1]["tests"] == functional * 2
    # a different window is an option
    prepare("livecodebench", tmp_path / "test.parquet", out, window=("2024-01-01", "2024-08-01"))
    assert [r["id"] for r in read_jsonl(out)] == ["livecodebench-abc001_a", "livecodebench-abc002_a"]


def test_livecodebench_refuses_pickles_that_would_run_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    evil = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    rows = [lcb_row("x1", "2024-09-01", evil), lcb_row("x2", "2024-09-01", "not base64 !!")]
    report = prepare("livecodebench", write_parquet(tmp_path / "t.parquet", rows), tmp_path / "o.jsonl",
                     on_bad_row="skip")
    assert not (tmp_path / "pwned").exists()
    assert report.written == 0 and report.skipped == 2
    assert "refusing to load global" in report.bad_rows[0]["reason"]
    assert "cannot decode test cases" in report.bad_rows[1]["reason"]


def test_decode_test_cases_round_trip():
    tests = [{"input": "a", "output": "b", "testtype": "stdin"}]
    assert decode_test_cases(encode_private(tests)) == tests
    assert decode_test_cases(json.dumps(tests)) == tests
    assert decode_test_cases("") == []


DAPO_PREFIX = ("Solve the following math problem step by step. The last line of your response should be of the "
               "form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n")
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'


def dapo_row(problem, answer, index):
    return {"data_source": "math_dapo",
            "prompt": [{"content": DAPO_PREFIX + problem + DAPO_SUFFIX, "role": "user"}],
            "ability": "MATH", "reward_model": {"ground_truth": answer, "style": "rule-lm"},
            "extra_info": {"index": index}}


def test_dapo_deduplicates_the_repeats_and_strips_the_instruction(tmp_path):
    rows = []
    for repeat in range(4):  # the hub copy repeats every problem
        rows += [dapo_row("Find $x$ if $x+1=3$.", "2", "uuid-a"), dapo_row("Compute $6 \\cdot 7$.", "42", "uuid-b")]
    rows.append(dapo_row("Compute $6 \\cdot 7$.", "41", "uuid-c"))  # same text, other answer: kept
    out = tmp_path / "train" / "dapo-math-17k.jsonl"
    assert main(["prepare-data", "--dataset", "dapo-math-17k", "--source",
                 str(write_parquet(tmp_path / "data" / "dapo-math-17k.parquet", rows)), "--out", str(out)]) == 0
    records = list(read_jsonl(out))
    assert records == [
        {"id": "dapo-0000", "problem": "Find $x$ if $x+1=3$.", "answer": "2", "source_id": "uuid-a",
         "source": "dapo-math-17k"},
        {"id": "dapo-0001", "problem": "Compute $6 \\cdot 7$.", "answer": "42", "source_id": "uuid-b",
         "source": "dapo-math-17k"},
        {"id": "dapo-0008", "problem": "Compute $6 \\cdot 7$.", "answer": "41", "source_id": "uuid-c",
         "source": "dapo-math-17k"},
    ]
    report = prepare("dapo-math-17k", tmp_path / "data" / "dapo-math-17k.parquet", out)
    assert report.duplicates == 6 and report.written == 3


def test_polaris_from_jsonl_and_bad_rows_skipped_and_counted(tmp_path, capsys):
    rows = [{"problem": "What is $2^5$?", "answer": "32", "difficulty": "7/8"},
            {"problem": "", "answer": "1", "difficulty": "1/8"},
            {"problem": "Solve $x$.", "answer": None, "difficulty": "2/8"},
            {"problem": "Area?", "answer": "\\frac{\\pi}{4}", "difficulty": "0/8"}]
    src = write_jsonl_rows(tmp_path / "polaris.jsonl", rows)
    out = tmp_path / "polaris-53k.jsonl"
    assert main(["prepare-data", "--dataset", "polaris-53k", "--source", str(src), "--out", str(out),
                 "--on-bad-row", "skip"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["written"] == 2 and report["skipped"] == 2
    assert report["bad_rows"] == [{"id": "polaris-0001", "reason": "field 'problem' is empty", "file": str(src), "line": 2},
                                  {"id": "polaris-0002", "reason": "answer is None", "file": str(src), "line": 3}]
    assert [r["id"] for r in read_jsonl(out)] == ["polaris-0000", "polaris-0003"]
    assert list(read_jsonl(out))[0]["difficulty"] == "7/8"


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["prepare-data", "--benchmark", "gsm8k", "--source", "x", "--out", str(tmp_path / "o")]) == 2
    assert "unknown benchmark 'gsm8k'" in capsys.readouterr().err
    assert main(["prepare-data", "--benchmark", "math500", "--source", str(tmp_path / "missing.parquet"),
                 "--out", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = write_jsonl_rows(tmp_path / "m.jsonl", [{"problem": "p", "answer": "1"}, {"answer": "2"}])
    assert main(["prepare-data", "--benchmark", "math500", "--source", str(bad), "--out", str(tmp_path / "o"),
                 "--on-bad-row", "fail"]) == 2
    assert f"math500-0001, line 2 of {bad}: missing field 'problem' or 'question'" in capsys.readouterr().err
    assert main(["prepare-data", "--list"]) == 0
    assert "Hothan/OlympiadBench [OE_TO_maths_en_COMP]" in capsys.readouterr().out


def test_a_save_to_disk_folder_and_an_unreachable_hub_id(tmp_path, monkeypatch):
    import datasets

    datasets.Dataset.from_list([{"problem": "p", "answer": "1"}]).save_to_disk(str(tmp_path / "saved"))
    report = prepare("aime24", tmp_path / "saved", tmp_path / "a.jsonl")
    assert report.written == 1
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"cannot load math500 from HuggingFaceH4/MATH-500 \(split 'test'"):
        prepare("math500", "HuggingFaceH4/MATH-500", tmp_path / "m.jsonl")


def test_a_training_row_whose_gold_the_verifier_cannot_parse_is_dropped_and_counted(tmp_path, capsys):
    """Polaris-style golds: an escaped dollar and a trailing backslash are read as a reader reads them
    (kept); a gold with nothing to compare with would never be rewarded (dropped, named in the report)."""
    rows = [{"problem": "Cost?", "answer": "\\$58", "difficulty": "3/8"},
            {"problem": "Which choice?", "answer": "\\textbf{(D)}\\", "difficulty": "5/8"},
            {"problem": "Prove it.", "answer": "\\text{}", "difficulty": "1/8"}]
    src = write_jsonl_rows(tmp_path / "polaris.jsonl", rows)
    out = tmp_path / "polaris-53k.jsonl"
    assert main(["prepare-data", "--dataset", "polaris-53k", "--source", str(src), "--out", str(out),
                 "--on-bad-row", "skip"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in read_jsonl(out)] == ["polaris-0000", "polaris-0001"]
    assert report["skipped"] == 1 and report["bad_rows"][0]["id"] == "polaris-0002"
    assert "cannot be parsed by the math verifier" in report["bad_rows"][0]["reason"]
    with pytest.raises(BadRowError, match="polaris-0002, line 3 of .*: gold answer"):
        prepare("polaris-53k", src, tmp_path / "strict.jsonl", on_bad_row="fail")


def test_a_benchmark_row_whose_gold_the_verifier_cannot_parse_is_kept_and_listed(tmp_path, capsys):
    """Evaluation scores such a problem incorrect and counts it, so the benchmark keeps its size."""
    rows = [dict(MATH500_ROWS[0]), dict(MATH500_ROWS[1], answer="\\$18.25"), dict(MATH500_ROWS[2], answer="\\text{}")]
    src = write_jsonl_rows(tmp_path / "m" / "test.jsonl", rows)
    out = tmp_path / "math500.jsonl"
    assert main(["prepare-data", "--benchmark", "math500", "--source", str(src), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["written"] == 3 and report["skipped"] == 0
    assert report["unparsable_golds"] == [{"id": "math500-0002", "answer": "\\text{}"}]
    assert "1 problem(s) whose gold answer the math verifier cannot parse" in captured.err

"""The tiny world's raw datasets: real schemas field by field, real loaders, determinism, alphabet."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import pickle
import re
import zlib

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from balagg.data.fields import last_boxed  # noqa: E402
from balagg.data.rows import DAPO_PREFIX, DAPO_SUFFIX  # noqa: E402
from balagg.tinyworld.model import ALPHABET  # noqa: E402
from balagg.benchmarks import BENCHMARKS, TRAINING_SETS as TRAIN_SETS  # noqa: E402
from balagg.tinyworld.raw import LAYOUT, read_rows, write_raw  # noqa: E402

# Columns of the real datasets (their hub cards), in the order the hub shows them.
REAL_COLUMNS = {
    "dapo-math-17k": ["data_source", "prompt", "ability", "reward_model", "extra_info"],
    "polaris-53k": ["problem", "answer", "difficulty"],
    "math500": ["problem", "solution", "answer", "subject", "level", "unique_id"],
    "aime24": ["id", "problem", "solution", "answer", "url", "year"],
    "aime25": ["id", "problem", "solution", "answer", "url", "year"],
    "olympiadbench": ["id", "question", "solution", "final_answer", "context", "image_1", "image_2", "image_3",
                      "image_4", "image_5", "is_multiple_answer", "unit", "answer_type", "subfield", "subject",
                      "language", "error", "question_type"],
    "minerva": ["problem", "solution", "type", "idx"],
    "livecodebench": ["question_title", "question_content", "platform", "question_id", "contest_id",
                      "contest_date", "starter_code", "difficulty", "public_test_cases", "private_test_cases",
                      "metadata"],
}
EXPRESSION = re.compile(r"^(Compute|Evaluate) ([0-9+-]+)\.$")


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    out = tmp_path_factory.mktemp("raw")
    manifest = write_raw(out, seed=7, train_problems=60, bench_problems=12)
    return out, manifest


def rows_of(raw, name):
    out, manifest = raw
    return read_rows(out / manifest["datasets"][name]["path"])


def solve(problem: str) -> int:
    match = EXPRESSION.match(problem)
    assert match, problem
    return eval(match.group(2))  # noqa: S307 - digits and +/- only


def test_manifest_lists_every_dataset_with_its_hub_layout(raw):
    out, manifest = raw
    assert set(manifest["datasets"]) == set(REAL_COLUMNS) == set(TRAIN_SETS) | set(BENCHMARKS)
    for name, entry in manifest["datasets"].items():
        assert (out / entry["path"]).is_file() and entry["path"] == f"{name}/{LAYOUT[name]['path']}"
        assert entry["rows"] == (60 if entry["role"] == "train" else 12)
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert not [p for p in out.rglob(".*") if p.is_file()]  # no temp files left


@pytest.mark.parametrize("name", list(REAL_COLUMNS))
def test_columns_match_the_real_schema(raw, name):
    rows = rows_of(raw, name)
    assert len(rows) in (60, 12)
    for row in rows:
        assert list(row) == REAL_COLUMNS[name]


def test_dapo_rows(raw):
    for row in rows_of(raw, "dapo-math-17k"):
        assert row["data_source"] == "math_dapo" and row["ability"] == "MATH"
        [message] = row["prompt"]
        assert message["role"] == "user"
        content = message["content"]
        assert content.startswith(DAPO_PREFIX) and content.endswith(DAPO_SUFFIX)
        problem = content[len(DAPO_PREFIX):-len(DAPO_SUFFIX)]
        assert problem.startswith("Compute ")
        assert row["reward_model"]["ground_truth"] == str(solve(problem))
        assert row["reward_model"]["style"] == "rule-lighteval/MATH_v2"
        assert re.fullmatch(r"[0-9a-f-]{36}", row["extra_info"]["index"])


def test_polaris_and_plain_math_rows(raw):
    for row in rows_of(raw, "polaris-53k"):
        assert row["problem"].startswith("Evaluate ") and row["answer"] == str(solve(row["problem"]))
        assert re.fullmatch(r"[0-8]/8", row["difficulty"])
    for name in ("math500", "aime24", "aime25"):
        for row in rows_of(raw, name):
            assert isinstance(row["answer"], str) and row["answer"] == str(solve(row["problem"]))
            assert last_boxed(row["solution"]) == row["answer"]
    assert all(isinstance(r["level"], int) and 1 <= r["level"] <= 5 for r in rows_of(raw, "math500"))
    assert all(r["year"] == "2024" and isinstance(r["id"], int) for r in rows_of(raw, "aime24"))
    assert all(len(EXPRESSION.match(r["problem"]).group(2)) >= 9 for r in rows_of(raw, "aime24"))  # 4 steps


def test_olympiadbench_and_minerva_rows(raw):
    for row in rows_of(raw, "olympiadbench"):
        assert row["final_answer"] == [str(solve(row["question"]))]
        assert isinstance(row["solution"], list) and last_boxed(row["solution"][0]) == row["final_answer"][0]
        assert row["is_multiple_answer"] is False and row["context"] is None
    for row in rows_of(raw, "minerva"):
        assert "answer" not in row  # the gold is only in the solution's last box, as in the real file
        assert last_boxed(row["solution"]) == str(solve(row["problem"]))


def test_livecodebench_rows_encode_tests_like_livecodebench(raw):
    platforms = set()
    for row in rows_of(raw, "livecodebench"):
        public = json.loads(row["public_test_cases"])
        private = json.loads(pickle.loads(zlib.decompress(base64.b64decode(row["private_test_cases"]))))
        metadata = json.loads(row["metadata"])
        assert len(public) == 2 and len(private) == 4
        date = dt.datetime.fromisoformat(row["contest_date"])
        assert dt.datetime(2024, 8, 1) <= date <= dt.datetime(2025, 2, 1)
        platforms.add(row["platform"])
        kind = "functional" if row["platform"] == "leetcode" else "stdin"
        assert {t["testtype"] for t in public + private} == {kind}
        if kind == "functional":
            assert metadata == {"func_name": "calc"} and "def calc(self" in row["starter_code"]
        else:
            assert metadata == {} and row["starter_code"] == ""
        # the tests are right: the expression in the question gives every expected output
        expression = re.search(r"(x[0-9+-]+)\.$", row["question_content"]).group(1)
        for test in public + private:
            x = int(test["input"].strip())
            assert test["output"].strip() == str(eval(expression, {"x": x}))  # noqa: S307
    assert platforms == {"leetcode", "atcoder"}


def test_real_loaders_read_every_dataset(raw, tmp_path):
    from balagg.data import prepare

    out, manifest = raw
    for name, entry in manifest["datasets"].items():
        report = prepare(name, out / name, tmp_path / f"{name}.jsonl", role=entry["role"])
        assert report.written == entry["rows"] and report.skipped == 0 and report.filtered == 0
        records = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        for record in records:
            if name == "livecodebench":
                assert record["kind"] == "code" and len(record["tests"]) == 6
            else:
                gold = record["answer"][0] if name == "olympiadbench" else record["answer"]
                assert gold == str(solve(record["problem"]))


def test_deterministic_from_the_seed(raw, tmp_path):
    out, manifest = raw
    again = write_raw(tmp_path / "again", seed=7, train_problems=60, bench_problems=12)
    other = write_raw(tmp_path / "other", seed=8, train_problems=60, bench_problems=12)
    for name in manifest["datasets"]:
        assert again["datasets"][name]["sha256"] == manifest["datasets"][name]["sha256"]
        assert other["datasets"][name]["sha256"] != manifest["datasets"][name]["sha256"]
    # one dataset's size does not move another's rows
    bigger = write_raw(tmp_path / "bigger", seed=7, train_problems=61, bench_problems=12)
    assert bigger["datasets"]["math500"]["sha256"] == manifest["datasets"]["math500"]["sha256"]


def test_every_character_is_in_the_tokenizer_alphabet(raw):
    out, _ = raw
    text = "".join(p.read_text() for p in out.rglob("*.jsonl"))
    text += json.dumps([rows_of(raw, n) for n in ("dapo-math-17k", "aime24", "olympiadbench", "livecodebench")])
    for row in rows_of(raw, "livecodebench"):
        text += row["starter_code"] + row["question_content"]
    assert set(text) <= set(ALPHABET)


def test_bad_arguments_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="at least 1"):
        write_raw(tmp_path, seed=0, train_problems=0)
    with pytest.raises(ValueError, match="unknown tiny-world dataset"):
        write_raw(tmp_path, seed=0, names=("gsm8k",))


def test_livecodebench_gold_programs_pass_the_evaluation_sandbox(raw, tmp_path):
    """The synthetic code benchmark, read by the real loader and graded by the real sandbox: each gold
    program (as a model would write it, in a fenced block) passes all its tests; an off-by-one fails."""
    from balagg.data import prepare
    from balagg.evaluation.verify.sandbox import Sandbox, SandboxLimits, extract_code, isolation_mode
    from balagg.tinyworld.tasks import CodeProblem

    if isolation_mode() != "namespaces":
        pytest.skip("the evaluation sandbox needs root and unshare")
    out, _ = raw
    prepare("livecodebench", out / "livecodebench", tmp_path / "lcb.jsonl", role="benchmark")
    records = [json.loads(line) for line in (tmp_path / "lcb.jsonl").read_text().splitlines()][:4]
    sandbox = Sandbox(SandboxLimits(timeout_s=3.0))
    for record in records:
        expression = re.search(r"(x[0-9+-]+)\.$", record["problem"]).group(1)
        ops = tuple((m[0], int(m[1:])) for m in re.findall(r"[+-]\d", expression))
        gold = CodeProblem(ops=ops, call_based=record["fn_name"] is not None).solution
        assert sandbox.run(extract_code(gold), record["tests"], record["fn_name"]).passed, record["id"]
        wrong = extract_code(gold).replace(expression, expression + "+1")
        assert not sandbox.run(wrong, record["tests"], record["fn_name"]).passed

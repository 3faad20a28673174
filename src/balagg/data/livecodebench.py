"""LiveCodeBench code-generation rows: date window, test-case decoding, normalised record.

Source schema (``livecodebench/code_generation_lite``; parquet copy ``lighteval/code_generation_lite``):
question_title, question_content, platform, question_id, contest_id, contest_date, starter_code,
difficulty, public_test_cases (JSON list), private_test_cases (JSON list, or the encoded form
base64(zlib(pickle(json string)))), metadata (JSON object with ``func_name`` for call-based problems).

Decoding unpickles dataset content, so it goes through an unpickler that refuses every global: a
pickled ``str``/``bytes`` loads, anything that would import or call code raises.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import io
import json
import pickle
import zlib

from balagg.data.fields import BadRow, text_field

DEFAULT_WINDOW: tuple[str, str] = ("2024-08-01", "2025-02-01")
"""Contest dates kept by default, both ends inclusive (279 problems: the DeepCoder / "LCB v5" window)."""

SYNTHETIC_FIRST_DATE = dt.datetime(2024, 8, 1)
"""The tiny world's contest dates start here and stay inside :data:`DEFAULT_WINDOW` (:func:`raw_row`)."""

TEST_TYPES = ("functional", "stdin")


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # noqa: D401 - pickle hook
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")


def decode_test_cases(value) -> list:
    """Test cases from a JSON string, an already-parsed list, or base64(zlib(pickle(json))); '' -> []."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return []
    if isinstance(value, list):
        return value
    if not isinstance(value, str):
        raise BadRow(f"test cases are a {type(value).__name__}, expected a string")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        try:
            raw = zlib.decompress(base64.b64decode(value.encode("ascii"), validate=True))
            inner = _NoGlobalsUnpickler(io.BytesIO(raw)).load()
            parsed = json.loads(inner) if isinstance(inner, (str, bytes)) else inner
        except (binascii.Error, zlib.error, pickle.UnpicklingError, UnicodeError, EOFError,
                json.JSONDecodeError, ValueError) as error:
            raise BadRow(f"cannot decode test cases ({type(error).__name__}: {error})") from None
    if not isinstance(parsed, list):
        raise BadRow(f"decoded test cases are a {type(parsed).__name__}, expected a list")
    return parsed


def normalise_tests(cases: list) -> list[dict]:
    """Keep input, output and testtype of each case, checking their types."""
    tests = []
    for k, case in enumerate(cases):
        if not isinstance(case, dict):
            raise BadRow(f"test {k} is a {type(case).__name__}, expected an object")
        try:
            test = {"input": case["input"], "output": case["output"], "testtype": case["testtype"]}
        except KeyError as missing:
            raise BadRow(f"test {k} has no {missing.args[0]!r}") from None
        if not isinstance(test["input"], str) or not isinstance(test["output"], str):
            raise BadRow(f"test {k}: input and output must be strings")
        if test["testtype"] not in TEST_TYPES:
            raise BadRow(f"test {k}: unknown testtype {test['testtype']!r}")
        tests.append(test)
    return tests


def parse_date(value) -> dt.datetime:
    """A contest date from a datetime/date/timestamp object or an ISO string."""
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    if hasattr(value, "to_pydatetime"):  # pandas Timestamp
        return value.to_pydatetime().replace(tzinfo=None)
    if isinstance(value, str):
        try:
            return dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00")).replace(tzinfo=None)
        except ValueError:
            pass
    raise BadRow(f"contest_date {value!r} is not a date")


def in_window(date: dt.datetime, window: tuple[str, str]) -> bool:
    """``start <= date <= end`` with both ends read as midnight (lcb_runner's --start_date/--end_date)."""
    start, end = (parse_date(edge) for edge in window)
    return start <= date <= end


def normalise_row(row: dict, window: tuple[str, str] = DEFAULT_WINDOW) -> dict | None:
    """The benchmark record of one LCB row, or None when its contest date is outside ``window``."""
    if not in_window(parse_date(row.get("contest_date")), window):
        return None
    question_id = text_field(row, "question_id")
    metadata = row.get("metadata") or "{}"
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            raise BadRow("metadata is not valid JSON") from None
    if not isinstance(metadata, dict):
        raise BadRow("metadata is not a JSON object")
    tests = normalise_tests(decode_test_cases(row.get("public_test_cases"))
                            + decode_test_cases(row.get("private_test_cases")))
    if not tests:
        raise BadRow("no test cases")
    fn_name = metadata.get("func_name") or None
    if fn_name is None and any(t["testtype"] == "functional" for t in tests):
        raise BadRow("functional tests but no func_name in metadata")
    return {
        "id": f"livecodebench-{question_id}",
        "problem": text_field(row, "question_content"),
        "starter_code": row.get("starter_code") or "",
        "fn_name": fn_name,
        "tests": tests,
        "title": row.get("question_title") or "",
        "platform": row.get("platform") or "",
        "difficulty": row.get("difficulty") or "",
        "contest_date": parse_date(row.get("contest_date")).date().isoformat(),
        "source_id": question_id,
    }


def encode_private_tests(tests: list[dict]) -> str:
    """LiveCodeBench's encoding of private tests: base64(zlib(pickle(json string))), which
    :func:`decode_test_cases` reads."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def raw_row(problem, index: int, rng) -> dict:
    """A synthetic code problem of the tiny world (:class:`balagg.tinyworld.tasks.CodeProblem`) as a row of
    the parquet copy: question_title, question_content, platform, question_id, contest_id, contest_date,
    starter_code, difficulty, public_test_cases (JSON), private_test_cases (encoded), metadata (JSON with
    func_name for call-based problems). Its six test inputs are drawn from ``rng``."""
    xs = rng.sample(range(-20, 21), 6)
    return {
        "question_title": f"Chain {index}",
        "question_content": problem.question,
        "platform": "leetcode" if problem.call_based else "atcoder",
        "question_id": f"tw{index:04d}",
        "contest_id": f"tinyworld-{index // 4:03d}",
        "contest_date": (SYNTHETIC_FIRST_DATE + dt.timedelta(days=1 + index % 180)).isoformat(),
        "starter_code": problem.starter_code,
        "difficulty": "easy",
        "public_test_cases": json.dumps([problem.test(x) for x in xs[:2]]),
        "private_test_cases": encode_private_tests([problem.test(x) for x in xs[2:]]),
        "metadata": json.dumps({"func_name": "calc"} if problem.call_based else {}),
    }

"""Row normalisers: one function per source schema, ``row -> record`` (without ``id``/``benchmark``).

Each raises :class:`~balagg.data.fields.BadRow` with a reason for a malformed row and may return None
for a row the source's filter drops (LiveCodeBench's date window). Records follow docs/files.md;
``source_id`` keeps the source's own id where it has one.
"""

from __future__ import annotations

from balagg.data.fields import BadRow, answer_text, last_boxed, text_field
from balagg.prompts import DAPO_TEMPLATE

DAPO_PREFIX, DAPO_SUFFIX = DAPO_TEMPLATE.split("{problem}")  # the dataset's own instruction wrapper


def _source_id(row: dict, *names: str):
    for name in names:
        if row.get(name) is not None:
            return row[name]
    return None


def plain_math(row: dict) -> dict:
    """Schema ``problem``, ``answer`` (MATH-500, AIME 2024/2025 copies, Polaris)."""
    record = {"problem": text_field(row, "problem", "question"),
              "answer": answer_text(row.get("answer"))}
    source_id = _source_id(row, "unique_id", "id", "idx")
    if source_id is not None:
        record["source_id"] = source_id
    for extra in ("subject", "level", "difficulty", "year"):
        if row.get(extra) is not None:
            record[extra] = row[extra]
    return record


def olympiadbench(row: dict) -> dict:
    """``Hothan/OlympiadBench``: ``question`` (+ optional ``context``), ``final_answer`` a list of strings."""
    question = text_field(row, "question")
    context = row.get("context")
    if isinstance(context, str) and context.strip():
        question = f"{context.strip()}\n\n{question}"
    answers = row.get("final_answer")
    if not isinstance(answers, (list, tuple)):
        raise BadRow(f"final_answer is a {type(answers).__name__}, expected a list")
    answers = [answer_text(a) for a in answers]
    if not answers:
        raise BadRow("final_answer is an empty list")
    record = {"problem": question, "answer": answers}
    for key, name in (("source_id", "id"), ("unit", "unit"), ("answer_type", "answer_type"),
                      ("is_multiple_answer", "is_multiple_answer")):
        if row.get(name) is not None:
            record[key] = row[name]
    return record


def minerva(row: dict) -> dict:
    """Minerva-MATH (Qwen2.5-Math ``minerva_math/test.jsonl``): gold = last ``\\boxed{}`` of ``solution``."""
    problem = text_field(row, "problem", "question")
    solution = row.get("solution")
    if isinstance(solution, str) and solution.strip():
        gold = last_boxed(solution)
        if gold is None:
            raise BadRow("solution has no \\boxed{} answer")
    elif row.get("answer") is not None:
        gold = answer_text(row["answer"])
    else:
        raise BadRow("missing field 'solution'")
    record = {"problem": problem, "answer": gold}
    source_id = _source_id(row, "idx", "id")
    if source_id is not None:
        record["source_id"] = source_id
    if row.get("type") is not None:
        record["subject"] = row["type"]
    return record


def dapo(row: dict) -> dict:
    """``BytedTsinghua-SIA/DAPO-Math-17k``: the user turn of ``prompt`` minus DAPO's fixed instruction
    wrapper (so the suite's own prompt template applies), gold ``reward_model.ground_truth``."""
    prompt = row.get("prompt")
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise BadRow("prompt is not a non-empty list of chat messages")
    users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1], str) or not users[-1].strip():
        raise BadRow("prompt has no user message")
    problem = users[-1]
    if problem.startswith(DAPO_PREFIX):
        problem = problem[len(DAPO_PREFIX):]
    if problem.endswith(DAPO_SUFFIX):
        problem = problem[: -len(DAPO_SUFFIX)]
    problem = problem.strip()
    if not problem:
        raise BadRow("problem text is empty after removing the DAPO instruction")
    reward_model = row.get("reward_model")
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise BadRow("reward_model.ground_truth missing")
    record = {"problem": problem, "answer": answer_text(reward_model["ground_truth"])}
    extra = row.get("extra_info")
    if isinstance(extra, dict) and extra.get("index") is not None:
        record["source_id"] = extra["index"]
    return record

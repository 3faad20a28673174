"""Row functions, a pair per source schema (balagg.data.sources names each source's pair):

- normalisers, ``row -> record`` (without ``id``/``benchmark``): each raises
  :class:`~balagg.data.fields.BadRow` with a reason for a malformed row and may return None for a row the
  source's filter drops (LiveCodeBench's date window). Records follow docs/files.md; ``source_id`` keeps
  the source's own id where it has one;
- raw-row writers, ``(problem, index, rng) -> row``: a synthetic problem of the tiny world
  (:mod:`balagg.tinyworld.raw`; its ``text``, integer ``answer``, worked ``solution`` and ``n_steps``)
  as one row of the source's raw schema, which the normaliser reads back. ``rng`` is the dataset's own
  stream, after its problems were drawn.
"""

from __future__ import annotations

import uuid

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


# ---- raw rows of synthetic problems (the tiny world's copies) -------------------------------------------

def raw_math500(problem, index: int, rng) -> dict:
    """MATH-500: problem, solution, answer, subject, level (1-5), unique_id."""
    return {"problem": problem.text, "solution": problem.solution, "answer": str(problem.answer),
            "subject": "Prealgebra", "level": problem.n_steps, "unique_id": f"test/prealgebra/{index}.json"}


def raw_aime(name: str, year: str):
    """The raw-row writer of an AIME copy ``name`` (HuggingFaceH4/aime_2024's schema: id, problem, solution,
    answer, url, year)."""
    def raw_row(problem, index: int, rng) -> dict:
        return {"id": index, "problem": problem.text, "solution": problem.solution, "answer": str(problem.answer),
                "url": f"https://example.invalid/tinyworld/{name}/{index}", "year": year}
    return raw_row


def raw_olympiadbench(problem, index: int, rng) -> dict:
    """OlympiadBench OE_TO_maths_en_COMP: id, question, solution (list), final_answer (list of str),
    context, image_1..5, is_multiple_answer, unit, answer_type, subfield, subject, language, error,
    question_type."""
    return {"id": 1000 + index, "question": problem.text, "solution": [problem.solution],
            "final_answer": [str(problem.answer)], "context": None, **{f"image_{k}": None for k in range(1, 6)},
            "is_multiple_answer": False, "unit": None, "answer_type": "Numerical", "subfield": "Algebra",
            "subject": "Math", "language": "English", "error": None, "question_type": "Open-ended"}


def raw_minerva(problem, index: int, rng) -> dict:
    """Minerva-MATH: problem, solution (gold = its last ``\\boxed{}``), type, idx."""
    return {"problem": problem.text, "solution": problem.solution, "type": "Arithmetic", "idx": index}


def raw_dapo(problem, index: int, rng) -> dict:
    """DAPO-Math-17k: data_source, prompt (one user message with DAPO's wrapper), ability, reward_model
    {ground_truth, style}, extra_info {index} (a uuid from ``rng``)."""
    return {"data_source": "math_dapo",
            "prompt": [{"content": DAPO_PREFIX + problem.text + DAPO_SUFFIX, "role": "user"}],
            "ability": "MATH", "reward_model": {"ground_truth": str(problem.answer), "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": str(uuid.UUID(int=rng.getrandbits(128), version=4))}}


def raw_polaris(problem, index: int, rng) -> dict:
    """Polaris-Dataset-53K: problem, answer, difficulty (a pass rate ``k/8``: nominal here, one fewer of 8
    per step of the chain)."""
    return {"problem": problem.text, "answer": str(problem.answer), "difficulty": f"{8 - problem.n_steps}/8"}

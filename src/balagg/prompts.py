"""The prompts, the tokenizer and the answer extraction that training and evaluation share.

A problem becomes model input in two steps, the same in both stages:

1. :func:`render_prompt` (through :func:`problem_prompt`): the user turn, ``template`` with ``{problem}``
   (and, for code, other named fields) replaced literally in one pass -- no ``str.format``, so LaTeX
   braces such as ``\\boxed{}`` need no escaping (the templates: :data:`MATH_TEMPLATE`,
   :data:`DAPO_TEMPLATE`, :data:`CODE_TEMPLATE`);
2. :class:`PromptFormat` decides the wrapping: the tokenizer's chat template (one user message, an
   optional system message, ``add_generation_prompt=True`` and ``chat_template_kwargs()``, e.g. Qwen3's
   ``enable_thinking``) or the plain text.

:func:`prompt_ids` gives the token ids exactly as TRL 1.16's ``GRPOTrainer._tokenize_prompts`` makes them
from :func:`trl_prompt` with ``GRPOConfig.chat_template_kwargs = fmt.chat_template_kwargs()`` (conversation:
``apply_chat_template(..., tokenize=True, return_dict=True)``; plain: ``tokenizer(text=...)``), so the
evaluation's prompt for a problem is token for token the prompt the policy was trained on
(tests/test_prompts.py checks this against TRL's own method).

:func:`answer_for_verifier` is what the verifier sees of a response, for the trainer's reward and the
evaluation's scoring alike: the text after the reasoning (:func:`strip_reasoning`), whole for ``boxed``
(the verifier ranks the last ``\\boxed{}`` first; math-verify falls back to the last expression when there
is no box), for ``boxed-strict`` the same but only if it holds a ``\\boxed{`` (no box: no answer, scored
wrong; the laboratory's tiny models, whose truncated loops would otherwise be read by that fallback) or,
for ``answer-line``, the last ``Answer: ...`` line (the DAPO-Math-17k instruction; verl's ``math_dapo``
reward reads the same line) wrapped as a box.

:func:`load_tokenizer` loads a checkpoint's tokenizer alike for training, evaluation and the tiny world.
Only the standard library is imported at module level (the workflow and ``--help`` import this module);
:func:`load_tokenizer` imports transformers when called.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MATH_TEMPLATE = "{problem}\nPlease reason step by step, and put your final answer within \\boxed{}."
"""The math prompt (Qwen2.5-Math "boxed" style) of training and evaluation."""

DAPO_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)
"""DAPO-Math-17k's own user turn (its ``prompt`` column, verbatim around the problem): answer_format
``answer-line``."""

ANSWER_FORMATS = ("boxed", "boxed-strict", "answer-line")
"""How a math answer is read (:func:`answer_for_verifier`): ``boxed`` (MATH_TEMPLATE asks for
``\\boxed{}``), ``boxed-strict`` (the same, and an answer without a box is no answer) or
``answer-line`` (DAPO_TEMPLATE asks for a last ``Answer: ...`` line)."""

DEFAULT_ANSWER_FORMAT = "boxed"
"""The answer format of a model whose config names none (training, generation, scoring, the tiny-world card)."""

DEFAULT_CHAT_TEMPLATE = False
"""Whether prompts are wrapped in the tokenizer's chat template when a model's config does not say
(``chat_template``: a model's setting, the cell config's and ``generate``'s, each defaulting to this)."""

CODE_TEMPLATE = (
    "You will be given a question (problem specification) and will generate a correct Python program "
    "that matches the specification and passes all tests.\n\nQuestion: {problem}\n\n{code_instructions}"
)
"""The code prompt (LiveCodeBench's generic prompt); ``{code_instructions}`` is one of the two below."""

CODE_WITH_STARTER = (
    "You will use the following starter code to write the solution to the problem and enclose your code "
    "within delimiters.\n```python\n{starter_code}\n```\n"
)
CODE_STDIN = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on "
    "the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python "
    "program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.\n"
    "```python\n# YOUR CODE HERE\n```\n"
)

_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")


def render_prompt(template: str, **fields: str) -> str:
    """``template`` with each placeholder ``{name}`` of ``fields`` replaced by its value, in one pass.

    Every other character is literal, braces included (``\\boxed{}`` stays as written, ``{x}`` without a
    value stays ``{x}``), and text substituted in is never scanned again. Training and evaluation
    both render prompts with this function, so one template means the same prompt in both."""
    return _PLACEHOLDER.sub(lambda m: fields[m.group(1)] if m.group(1) in fields else m.group(0), template)


def check_template(template: str, placeholders: Iterable[str], what: str) -> None:
    """ValueError naming ``what`` unless ``template`` holds every ``{placeholder}``."""
    missing = [name for name in placeholders if "{" + name + "}" not in template]
    if missing:
        raise ValueError(f"{what} must contain the placeholder(s) " + ", ".join("{" + m + "}" for m in missing))


def problem_prompt(record: dict, math_template: str = MATH_TEMPLATE, code_template: str = CODE_TEMPLATE) -> str:
    """The user turn of one problem record (``kind`` math, the default, or code; docs/files.md)."""
    kind = record.get("kind", "math")
    if kind == "math":
        return render_prompt(math_template, problem=record["problem"])
    if kind == "code":
        starter = record.get("starter_code") or ""
        instructions = render_prompt(CODE_WITH_STARTER, starter_code=starter) if starter.strip() else CODE_STDIN
        return render_prompt(code_template, problem=record["problem"], code_instructions=instructions)
    raise ValueError(f"problem {record.get('id')}: unknown kind {kind!r}")


def chat_messages(text: str, system_prompt: str | None = None) -> list[dict[str, str]]:
    """The conversation a chat template renders: an optional system turn, then ``text`` as the user turn."""
    return ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": text}]


_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"


def strip_reasoning(text: str) -> str:
    """The answer part of a response, one rule for every metric and the reward: the text after the last
    ``</think>``; ``""`` if ``<think>`` never closes (thinking cut off by the token limit: no answer, so it
    scores 0); text without think tags is whole."""
    if _THINK_CLOSE in text:
        return text.rsplit(_THINK_CLOSE, 1)[1]
    if _THINK_OPEN in text:
        return ""
    return text


_ANSWER_LINE = re.compile(r"^\s*\**\s*answer\s*\**\s*:\s*\**\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class PromptFormat:
    """How a user turn is wrapped. ``enable_thinking`` (chat only) is passed to the chat template when not
    None (Qwen3's switch; a template without the variable ignores it)."""

    chat: bool
    enable_thinking: bool | None = None
    system_prompt: str | None = None

    def chat_template_kwargs(self) -> dict[str, Any]:
        """Extra ``apply_chat_template`` arguments (TRL: ``GRPOConfig.chat_template_kwargs``)."""
        return {"enable_thinking": self.enable_thinking} if self.chat and self.enable_thinking is not None else {}

    def messages(self, text: str) -> list[dict[str, str]]:
        return chat_messages(text, self.system_prompt)


def trl_prompt(text: str, fmt: PromptFormat) -> Any:
    """The dataset ``prompt`` value TRL gets: a conversation (chat) or the plain text."""
    return fmt.messages(text) if fmt.chat else text


def prompt_ids(tokenizer, text: str, fmt: PromptFormat) -> list[int]:
    """Token ids of the full prompt for user turn ``text``, exactly as TRL tokenizes :func:`trl_prompt`."""
    if fmt.chat:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the prompt format uses the chat template but the tokenizer has none")
        encoded = tokenizer.apply_chat_template(fmt.messages(text), add_generation_prompt=True, tokenize=True,
                                                return_dict=True, **fmt.chat_template_kwargs())
        return list(encoded["input_ids"])
    return list(tokenizer(text=text)["input_ids"])


def extract_answer_line(text: str) -> str | None:
    """The content of the last ``Answer: ...`` line of ``text`` (None if there is none)."""
    matches = _ANSWER_LINE.findall(text)
    return matches[-1] if matches else None


def answer_for_verifier(text: str, answer_format: str) -> str | None:
    """What the math verifier sees of response ``text`` (module docstring); None: no answer given."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")
    answer = strip_reasoning(text)
    if answer_format == "boxed":
        return answer
    if answer_format == "boxed-strict":
        return answer if "\\boxed{" in answer else None
    line = extract_answer_line(answer)
    return None if line is None else f"\\boxed{{{line}}}"


_AS_SAVED = ("PreTrainedTokenizerFast", "TokenizersBackend")


def load_tokenizer(path: str | os.PathLike):
    """A checkpoint's tokenizer, used alike by training, evaluation and the tiny world; ``path`` is a
    folder or a hub id resolved offline to its cached snapshot.

    When ``tokenizer_config.json`` names ``PreTrainedTokenizerFast`` or ``TokenizersBackend`` (what the
    tiny world's character-level tokenizer saves) the saved ``tokenizer.json`` is loaded as it is: for a
    ``qwen2`` model ``AutoTokenizer`` would return Qwen2's byte-level tokenizer instead and change the
    ids. Any other class (a real model's) loads through ``AutoTokenizer``. Padding is on the left (batched
    generation) and a tokenizer without a pad token pads with its EOS token."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(path)
    if not path.is_dir():  # a hub id: its snapshot in the local hub cache (never downloads)
        from balagg.hub import is_hub_id, resolve_snapshot

        if is_hub_id(path):
            path = resolve_snapshot(str(path))
    config_path = path / "tokenizer_config.json"
    if not config_path.is_file() and not (path / "tokenizer.json").is_file():
        raise ValueError(f"{path} has no tokenizer (tokenizer_config.json / tokenizer.json)")
    tokenizer_class = json.loads(config_path.read_text()).get("tokenizer_class") if config_path.is_file() else None
    if tokenizer_class in _AS_SAVED:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    else:
        tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer

"""One prompt wrapping and one answer extraction for training and evaluation.

A problem becomes model input in two steps, the same in both stages:

1. :func:`balagg.contract.render_prompt`: the user turn, ``template`` with ``{problem}`` (and, for code,
   other named fields) replaced literally in one pass -- no ``str.format``, so LaTeX braces such as
   ``\\boxed{}`` need no escaping (the templates: ``balagg.contract.MATH_TEMPLATE``, ``DAPO_TEMPLATE``);
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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from balagg import contract
from balagg.evaluation.verify.math_verifier import strip_reasoning

ANSWER_FORMATS = contract.ANSWER_FORMATS

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
        return contract.chat_messages(text, self.system_prompt)


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

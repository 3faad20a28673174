"""Field helpers shared by the row normalisers: typed access with a reason on failure, ``\\boxed{}``."""

from __future__ import annotations


class BadRow(Exception):
    """A source row that cannot be normalised; ``reason`` says why (the caller adds the row id)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def text_field(row: dict, *names: str) -> str:
    """The first of ``names`` present in ``row`` as a non-empty string (numbers are converted)."""
    for name in names:
        if name in row and row[name] is not None:
            value = row[name]
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise BadRow(f"field {name!r} is a {type(value).__name__}, expected text")
            text = str(value).strip()
            if not text:
                raise BadRow(f"field {name!r} is empty")
            return text
    raise BadRow(f"missing field {' or '.join(repr(n) for n in names)}")


def answer_text(value) -> str:
    """A gold answer as text: integers stay integers (``34.0`` -> ``"34"``), strings are stripped."""
    if isinstance(value, bool) or value is None:
        raise BadRow(f"answer is {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip()
    if not text:
        raise BadRow("answer is empty")
    return text


_BOX_COMMANDS = ("\\boxed", "\\fbox")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces matched; None if none.

    ``\\boxed 5`` (no braces) yields ``5``. An unclosed box is ignored.
    """
    best_start = max(text.rfind(command) for command in _BOX_COMMANDS)
    while best_start >= 0:
        command = next(c for c in _BOX_COMMANDS if text.startswith(c, best_start))
        content = _box_content(text, best_start + len(command))
        if content is not None:
            return content
        best_start = max(text.rfind(c, 0, best_start) for c in _BOX_COMMANDS)
    return None


def _box_content(text: str, pos: int) -> str | None:
    if pos < len(text) and text[pos] == " ":
        rest = text[pos + 1:]
        token = rest.split("$", 1)[0].split()[0] if rest.split() else ""
        return token or None
    if pos >= len(text) or text[pos] != "{":
        return None
    depth = 0
    for i in range(pos, len(text)):
        ch = text[i]
        if ch == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif ch == "}" and text[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return text[pos + 1:i].strip()
    return None

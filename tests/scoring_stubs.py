"""Verifiers with known misbehaviour for the VerifierPool tests (imported by worker processes)."""

import time


def slow_on_hang(text, gold):
    if text == "hang":
        time.sleep(60)
    if text == "boom":
        raise ValueError("cannot read this")
    return text == gold


def dies_once_on_die(text, gold):
    """As if killed from outside: the first worker to see "die" (marked by a file named in gold) exits
    hard; "die-always" kills every worker that sees it."""
    import os
    from pathlib import Path

    if text == "die-always":
        os._exit(9)
    if text == "die" and not Path(gold).exists():
        Path(gold).write_text("died")
        os._exit(9)
    return text != "die-always"

"""Verifiers with known misbehaviour for the VerifierPool tests (imported by worker processes)."""

import time


def slow_on_hang(text, gold):
    if text == "hang":
        time.sleep(60)
    if text == "boom":
        raise ValueError("cannot read this")
    return text == gold

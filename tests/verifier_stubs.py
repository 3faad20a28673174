"""Stand-in verifiers for tests of the trainer's reward plumbing (imported by the verifier's child process)."""

import time


def hangs_on_request(text, gold):
    """Exact string match, except that "hang" never returns (as sympy can on adversarial input) and
    "crash" raises."""
    if text == "hang":
        time.sleep(3600)
    if text == "crash":
        raise RuntimeError("verifier crashed")
    return text.strip() == f"\\boxed{{{gold[0] if isinstance(gold, list) else gold}}}"

"""Checking answers: what evaluation scores with and what training's reward calls.

- :mod:`~balagg.evaluation.verify.math_verifier`: ``verify_math(text, gold)``, the one math verifier, and
  ``verifier_info()``;
- :mod:`~balagg.evaluation.verify.pool`: verification in worker processes with a per-sample timeout;
- :mod:`~balagg.evaluation.verify.sandbox`: running model-written programs (LiveCodeBench) in isolation
  (:mod:`~balagg.evaluation.verify.sandbox_launcher` is the stdlib-only script that runs inside it).
"""

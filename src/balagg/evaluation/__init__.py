"""Scoring of generated answers (``balagg.evaluation``).

- :mod:`balagg.evaluation.math`: ``verify_math(text, gold)``, the one math verifier (also the trainer's
  reward) and ``verifier_info()``;
- :mod:`balagg.evaluation.metrics`: Acc@k, Best@k, verl's bootstrap Best@k and the unbiased pass@k from per-sample correctness;
- :mod:`balagg.evaluation.pool`: verification in worker processes with a per-sample timeout;
- :mod:`balagg.evaluation.sandbox`: running model-written programs (LiveCodeBench) in isolation
  (:mod:`balagg.evaluation.sandbox_launcher` is the stdlib-only script that runs inside it);
- :mod:`balagg.evaluation.score`: ``generations.jsonl`` -> ``scores.jsonl`` + ``summary.json``.

Generation (``balagg.evaluation.generate*``) produces the ``generations.jsonl`` these modules read.
"""

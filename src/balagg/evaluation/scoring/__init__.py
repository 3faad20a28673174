"""Scoring: samples to per-problem correctness, Acc@n, Best@n, pass@k and per-step summaries.

- :mod:`~balagg.evaluation.scoring.metrics`: Acc@n, Best@n, verl's bootstrap Best@n and the unbiased
  pass@k from 0/1 flags;
  a summary as table rows;
- :mod:`~balagg.evaluation.scoring.score`: ``generations.jsonl`` -> ``scores.jsonl`` + ``summary.json``.
"""

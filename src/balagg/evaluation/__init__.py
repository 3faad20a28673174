"""Evaluation of checkpoints, one subpackage per job.

- :mod:`balagg.evaluation.generation`: n samples per benchmark problem (requests, backends) ->
  ``generations.jsonl``;
- :mod:`balagg.evaluation.verify`: the math verifier, its process pool and the code sandbox (training's
  reward uses the same verifier and pool);
- :mod:`balagg.evaluation.scoring`: samples -> ``scores.jsonl`` and ``summary.json`` (Acc@n, Best@n).
"""

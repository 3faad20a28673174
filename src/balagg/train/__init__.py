"""GRPO training of one grid cell on TRL's GRPOTrainer with any aggregation rule.

- :mod:`balagg.train.config`: the resolved per-cell config (``cell.json``) and its GRPOConfig;
- :mod:`balagg.train.trainer`: ``AggregatedGRPOTrainer`` (rule weights folded into the advantages);
- :mod:`balagg.train.callbacks`: metrics.jsonl, MLflow metrics, evaluation checkpoints;
- :mod:`balagg.train.files`: the work-directory layout and atomic file operations;
- :mod:`balagg.train.data`: training prompts from the normalised JSONL;
- :mod:`balagg.train.run`: ``run_cell``, resume and the manifest.
"""

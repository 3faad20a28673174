"""Generation: n samples per benchmark problem from one checkpoint (``generations.jsonl``).

- :mod:`~balagg.evaluation.generation.requests`: the settings, one request per sample, a backend's completion;
- :mod:`~balagg.evaluation.generation.generate`: prompts, token budgets, seeds, resuming, the output files;
- :mod:`~balagg.evaluation.generation.transformers_backend` (CPU) and
  :mod:`~balagg.evaluation.generation.vllm_backend`: the sampling engines.
"""

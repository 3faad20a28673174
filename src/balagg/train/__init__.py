"""GRPO training of one grid cell on TRL's GRPOTrainer with any aggregation rule.

- :mod:`balagg.train.config`: the resolved per-cell config (``cell.json``) and its GRPOConfig;
- :mod:`balagg.train.trainer`: ``AggregatedGRPOTrainer`` (rule weights folded into the advantages);
- :mod:`balagg.train.sampler`: the prompt order, a function of (seed, epoch), so a resume is exact;
- :mod:`balagg.train.padding`: micro-batches trimmed to their own widest row (no forward pass on padding);
- :mod:`balagg.train.seeding`: the cell's seed in a colocated vLLM engine and the trainer's RNGs;
- :mod:`balagg.train.vllm_cpu`: the weight sync of a colocated engine on vLLM's CPU backend;
- :mod:`balagg.train.precision`: the FSDP2 mixed-precision policy (bf16 compute, fp32 reduce);
- :mod:`balagg.train.memory`: a train and an evaluation job's GPU memory, term by term (``balagg plan``);
- :mod:`balagg.train.callbacks`: metrics.jsonl, MLflow metrics, evaluation checkpoints;
- :mod:`balagg.train.eval_checkpoints`: weights-only evaluation checkpoints, refused when they hold no weights;
- :mod:`balagg.train.files`: the work-directory layout and atomic file operations;
- :mod:`balagg.train.data`: training prompts from the normalised JSONL;
- :mod:`balagg.train.deadline`: stopping at a resumable checkpoint before the time limit or on a signal;
- :mod:`balagg.train.launch`, :mod:`balagg.train.agent`: the launcher's role (``balagg train``): one
  process in its own, several through ``accelerate launch``, which passes stop signals on to the ranks;
- :mod:`balagg.train.run`: the worker's role (``balagg train-worker``): ``run_cell``, resume and the manifest.
"""

# Training: one job per grid cell. Resumable state lives in the cell's train/ work folder, which is not a
# declared output (Snakemake deletes declared outputs of failed jobs); the manifest, written last, is.
# A train job removes, before training, what was derived from the cell's previous training (its eval/
# and the campaign's analysis/): an interrupted (re)train then leaves them missing, so the next run sees
# the cell incomplete and redoes them, instead of "Nothing to be done" beside an old curve and Table 1.


rule cell_config:
    """The resolved per-cell config; rewritten (and training rerun) only when a value changes."""
    output:
        f"{CELL}/{layout.CELL_CONFIG_FILE}",
    params:
        cell=cell_config,
    log:
        f"{CELL}/logs/cell_config.log",
    localrule: True
    run:
        write_json(output[0], params.cell)


# GPU train jobs run with PyTorch's allocator growing its segments in place instead of keeping freed blocks of
# every micro-batch's size, which fragments the memory left beside the colocated vLLM engine. vLLM's sleep
# mode allocates from its own CUDA memory pool, which conflicts with expandable segments (its CuMemAllocator
# has refused them, pytorch#147851); balagg leaves sleep mode off. CPU train jobs get nothing (the job
# server then still serves them).
GPU_ALLOCATOR_ENV = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "


rule train:
    """GRPO on TRL with the cell's aggregation rule; resumes from the newest complete checkpoint.
    `balagg train` runs `accelerate launch` with the cell's GPU count (num_processes) when it has several."""
    input:
        cell=f"{CELL}/{layout.CELL_CONFIG_FILE}",
        data=lambda wildcards: GRID.data_path(wildcards.model, "train", wildcards.dataset),
        model=model_inputs,
        tracking=f"{RESULTS}/mlflow/experiment.json",
    output:
        manifest=f"{CELL}/{layout.CELL_MANIFEST_FILE}",
    params:
        workdir=f"{CELL}/{layout.TRAIN_DIR}",
        stale=f"--invalidate {CELL}/{layout.EVAL_DIR} --invalidate {RESULTS}/{layout.ANALYSIS_DIR}",
        allocator=lambda wildcards: GPU_ALLOCATOR_ENV if model_resource("train_resources", "gpus")(wildcards) > 0 else "",
    log:
        f"{CELL}/logs/train.log",
    benchmark:
        f"{CELL}/benchmarks/train.tsv"
    threads: 1
    # a job stopped at its time limit (or preempted) resumes from its newest checkpoint on the next attempt
    retries: config["train_retries"]
    resources:
        # all of a cell's GPUs on one node: the job step runs on one node (srun --nodes=1)
        nodes=1,
        gpu=model_resource("train_resources", "gpus"),
        cpus_per_task=model_resource("train_resources", "cpus"),
        mem_mb=model_resource("train_resources", "mem_mb"),
        runtime=model_resource("train_resources", "runtime"),
    conda:
        "../../envs/gpu.yaml"
    shell:
        "{params.allocator}python -m balagg train --cell {input.cell} --workdir {params.workdir}"
        " --out {output.manifest} {params.stale} > {log} 2>&1"

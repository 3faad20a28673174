# Evaluation: one generation job per (cell, checkpoint step) loads the model once for all benchmarks;
# scoring is a separate CPU job so it can rerun when the verifier changes; collect_curve gathers a cell.
# Step 0 is the initial model, the same for every cell of a model: it is evaluated once, under
# results/{campaign}/{model}/initial/, and shared by those cells' curves.

rule generate:
    """n samples per problem of every benchmark from one checkpoint."""
    input:
        weights=generate_weights_inputs,
        benchmarks=expand(BENCH_DATA, name=BENCHMARKS),
    output:
        f"{EVAL_STEP}/{contract.GENERATIONS_FILE}",
    params:
        checkpoint=checkpoint_path,
        bench_dir=bench_dir,
        benchmarks=",".join(BENCHMARKS),
        sampling=generation_args(),
        out=output_dir,
        prompt=prompt_args,
    log:
        f"{EVAL_RUN}/logs/generate-{{step}}.log",
    benchmark:
        f"{EVAL_RUN}/benchmarks/generate-{{step}}.tsv"
    threads: 1
    resources:
        gpu=model_resource("generate_resources", "gpus"),
        cpus_per_task=model_resource("generate_resources", "cpus"),
        mem_mb=model_resource("generate_resources", "mem_mb"),
        runtime=model_resource("generate_resources", "runtime"),
    conda:
        "../../envs/gpu.yaml"
    shell:
        "python -m balagg generate --checkpoint {params.checkpoint} --benchmarks-dir {params.bench_dir}"
        " --benchmarks {params.benchmarks} {params.sampling} {params.prompt} --out {params.out} > {log} 2>&1"


rule score:
    """Per-problem correctness, Acc@n / Best@n per benchmark and the mean (docs/files.md)."""
    input:
        generations=f"{EVAL_STEP}/{contract.GENERATIONS_FILE}",
        benchmarks=expand(BENCH_DATA, name=BENCHMARKS),
    output:
        scores=f"{EVAL_STEP}/{contract.SCORES_FILE}",
        summary=f"{EVAL_STEP}/{contract.SUMMARY_FILE}",
    params:
        bench_dir=bench_dir,
        code_timeout=config["eval"]["code_timeout_s"],
        out=output_dir,
    log:
        f"{EVAL_RUN}/logs/score-{{step}}.log",
    threads: 1
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg score --generations {input.generations} --benchmarks-dir {params.bench_dir}"
        " --step {wildcards.step} --code-timeout {params.code_timeout} --workers {threads}"
        " --out {params.out} > {log} 2>&1"


rule collect_curve:
    """All checkpoints' summaries of one cell as one table."""
    input:
        cell_step_summaries,
    output:
        f"{CELL}/{CURVE}",
    log:
        f"{CELL}/logs/collect_curve.log",
    localrule: True
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg curve --out {output} {input} > {log} 2>&1"

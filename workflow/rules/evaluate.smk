# Evaluation: one generation job per (cell, checkpoint step) loads the model once for all benchmarks;
# scoring is a separate CPU job so it can rerun when the verifier changes; collect_curve gathers a cell.
# Step 0 is the initial model, the same for every cell of a model: it is evaluated once, under
# results/{campaign}/{model}/initial/, and shared by those cells' curves.
# On a laptop the job server (docs/jobserver.md) keeps each job's start-up to a fork.
# An external checkpoint (config `checkpoints:`, balagg.external_checkpoints) is evaluated by the same generate and
# score rules, one job per step, under results/{campaign}/{name}/external/, and gets a curve like a cell.

rule generate:
    """n samples per problem of every benchmark from one checkpoint."""
    input:
        weights=generate_weights_inputs,
        benchmarks=model_benchmarks,
    output:
        f"{EVAL_STEP}/{layout.GENERATIONS_FILE}",
    params:
        checkpoint=checkpoint_path,
        bench_dir=bench_dir,
        benchmarks=",".join(BENCHMARKS),
        settings=lambda wildcards: arguments.generate_args(GRID, wildcards.model),
        out=output_dir,
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
        " --benchmarks {params.benchmarks} {params.settings} --out {params.out} > {log} 2>&1"


rule score:
    """Per-problem correctness, Acc@n / Best@n per benchmark and the mean (docs/files.md)."""
    input:
        generations=f"{EVAL_STEP}/{layout.GENERATIONS_FILE}",
        benchmarks=model_benchmarks,
    output:
        scores=f"{EVAL_STEP}/{layout.SCORES_FILE}",
        summary=f"{EVAL_STEP}/{layout.SUMMARY_FILE}",
    params:
        bench_dir=bench_dir,
        settings=arguments.score_args(GRID),
        out=output_dir,
    log:
        f"{EVAL_RUN}/logs/score-{{step}}.log",
    benchmark:
        f"{EVAL_RUN}/benchmarks/score-{{step}}.tsv"
    threads: 1
    # one verifier process (and code sandbox) per CPU the job gets: the Slurm profile gives score jobs
    # cpus_per_task (their --cpus-per-task); a local run keeps one, beside its other jobs
    resources:
        cpus_per_task=1,
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg score --generations {input.generations} --benchmarks-dir {params.bench_dir}"
        " --step {wildcards.step} {params.settings} --workers {resources.cpus_per_task}"
        " --out {params.out} > {log} 2>&1"


rule collect_curve:
    """All checkpoints' summaries of one cell (or of one external checkpoint) as one table."""
    input:
        cell_step_summaries,
    output:
        f"{EVAL_RUN}/{CURVE}",
    wildcard_constraints:
        run=CURVE_RUNS,
    log:
        f"{EVAL_RUN}/logs/collect_curve.log",
    benchmark:
        f"{EVAL_RUN}/benchmarks/collect_curve.tsv"
    localrule: True
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg curve --out {output} {input} > {log} 2>&1"


rule external_checkpoint:
    """What an external checkpoint is: its source, the revision and the commit fetch resolved it to, its
    steps and settings (checkpoint.json; Table 1 names it so, and its MLflow run is tagged so)."""
    input:
        fetch=lambda wildcards: [ancient(FETCH)] if EXTERNALS[wildcards.model].kind == "hub" else [],
    output:
        f"{RESULTS}/{{model}}/{EXTERNAL}/{layout.EXTERNAL_RECORD_FILE}",
    wildcard_constraints:
        model="|".join(re.escape(name) for name in EXTERNALS) or "(?!)",
    params:
        settings=lambda wildcards: config["checkpoints"][wildcards.model],
    log:
        f"{RESULTS}/{{model}}/{EXTERNAL}/logs/external_checkpoint.log",
    localrule: True
    run:
        write_external_record(wildcards, params, input, output)


rule merge_verl:
    """A verl checkpoint's FSDP shards merged into a Hugging Face folder by verl's own merger: under
    --sdm conda in envs/verl.yaml, else where Snakemake's Python imports verl; otherwise the workflow refuses
    the checkpoint at DAG build with this command (verl_in_jobs)."""
    output:
        f"{RESULTS}/{{model}}/{EXTERNAL}/{layout.MERGED_DIR}/{layout.STEP_DIR_PREFIX}{{step}}/config.json",
    wildcard_constraints:
        model="|".join(re.escape(name) for name, e in EXTERNALS.items() if e.verl) or "(?!)",
    params:
        command=lambda wildcards, output: externals.verl_merge_command(
            EXTERNALS[wildcards.model].verl[int(wildcards.step)], os.path.dirname(output[0])),
    log:
        f"{RESULTS}/{{model}}/{EXTERNAL}/logs/merge_verl-{{step}}.log",
    resources:
        mem_mb=model_resource("generate_resources", "mem_mb"),
        runtime=model_resource("generate_resources", "runtime"),
    conda:
        "../../envs/verl.yaml"
    shell:
        "{params.command} > {log} 2>&1"

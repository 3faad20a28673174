# Evaluation: one generation job per (cell, checkpoint step) loads the model once for all benchmarks;
# scoring is a separate CPU job so it can rerun when the verifier changes; collect_curve gathers a cell.

rule generate:
    """n samples per problem of every benchmark from one checkpoint."""
    input:
        manifest=f"{CELL}/manifest.json",
        benchmarks=expand(f"{RESULTS}/data/bench/{{name}}.jsonl", name=BENCHMARKS),
    output:
        f"{CELL}/eval/step-{{step}}/generations.jsonl",
    params:
        checkpoint=f"{CELL}/train/checkpoints/step-{{step}}",
        bench_dir=bench_dir,
        benchmarks=",".join(BENCHMARKS),
        sampling=generation_args(),
        out=output_dir,
        chat_template=chat_template_flag,
    log:
        f"{CELL}/logs/generate-{{step}}.log",
    benchmark:
        f"{CELL}/benchmarks/generate-{{step}}.tsv"
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
        " --benchmarks {params.benchmarks} {params.sampling} {params.chat_template} --out {params.out} > {log} 2>&1"


rule score:
    """Per-problem correctness, Acc@n / Best@n per benchmark and the mean (docs/files.md)."""
    input:
        generations=f"{CELL}/eval/step-{{step}}/generations.jsonl",
        benchmarks=expand(f"{RESULTS}/data/bench/{{name}}.jsonl", name=BENCHMARKS),
    output:
        scores=f"{CELL}/eval/step-{{step}}/scores.jsonl",
        summary=f"{CELL}/eval/step-{{step}}/summary.json",
    params:
        bench_dir=bench_dir,
        code_timeout=config["eval"]["code_timeout_s"],
        out=output_dir,
    log:
        f"{CELL}/logs/score-{{step}}.log",
    threads: 1
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg score --generations {input.generations} --benchmarks-dir {params.bench_dir}"
        " --step {wildcards.step} --code-timeout {params.code_timeout} --out {params.out} > {log} 2>&1"


rule collect_curve:
    """All checkpoints' summaries of one cell as one table."""
    input:
        cell_step_summaries,
    output:
        f"{CELL}/eval/curve.csv",
    log:
        f"{CELL}/logs/collect_curve.log",
    localrule: True
    conda:
        "../../envs/cpu.yaml"
    shell:
        "python -m balagg curve --out {output} {input} > {log} 2>&1"

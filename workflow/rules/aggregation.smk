rule weights_example:
    """Every aggregation rule's weights for the config's example group (`python -m balagg weights`)."""
    output:
        "results/{campaign}/aggregation/weights_example.txt",
    log:
        "results/{campaign}/logs/weights_example.log",
    params:
        rewards=",".join(str(r) for r in config["weights_example"]["rewards"]),
        lengths=",".join(str(n) for n in config["weights_example"]["lengths"]),
    shell:
        "python -m balagg weights --rewards {params.rewards} --lengths {params.lengths} > {output} 2> {log}"

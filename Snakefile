"""balagg workflow entry point.

Until the full grid lands (data -> train -> evaluate -> analysis, see README "Status"), the default
target runs what exists: the aggregation-weights report for the example group in the config.
"""

from snakemake.utils import min_version, validate

min_version("9.0")

configfile: "configs/default.yaml"

validate(config, "workflow/schemas/config.schema.yaml")

CAMPAIGN = config["campaign"]


include: "workflow/rules/aggregation.smk"


rule all:
    default_target: True
    input:
        f"results/{CAMPAIGN}/aggregation/weights_example.txt",

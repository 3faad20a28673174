"""What ``accelerate launch --config_file FILE --num_processes N`` gives every process it starts, computed
with accelerate's own launcher code (no GPU needed): the FSDP_* / ACCELERATE_* environment, and the
FullyShardedDataParallelPlugin that an Accelerator builds from it."""

from __future__ import annotations

from pathlib import Path


def launch_env(config_file: str | Path, num_processes: int = 8) -> dict[str, str]:
    """The FSDP_* and ACCELERATE_* variables accelerate's launcher sets for a multi-GPU launch of config_file."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    args = launch_command_parser().parse_args(["--config_file", str(config_file), "--num_processes",
                                               str(num_processes), "--main_process_port", "0", "train.py"])
    args, _defaults, _from_config = _validate_launch_command(args)
    return {key: value for key, value in prepare_multi_gpu_env(args).items()
            if key.startswith(("FSDP_", "ACCELERATE_"))}


def launched_plugin():
    """The plugin of a launched process, from the environment that :func:`launch_env` put in place: the
    Accelerator builds it from the environment and AcceleratorState sets the mixed precision on it."""
    import os

    from accelerate.utils import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin()
    plugin.set_mixed_precision(os.environ["ACCELERATE_MIXED_PRECISION"])
    return plugin

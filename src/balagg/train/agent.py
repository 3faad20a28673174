"""``python -m balagg.train.agent <accelerate launch arguments>``: ``accelerate launch``, whose torchrun
agent runs in this process with one child process per rank, made to pass the trainer's stop signals on to
the ranks.

A trainer rank that gets a stop signal (SIGTERM, SIGUSR1, SIGURG: balagg.processes.STOP_SIGNALS) stops at
its next generation-cycle boundary with a resumable checkpoint and exits 75 (balagg.train.deadline); on GPUs
that takes minutes. torchrun's agent, left to itself, answers SIGTERM by terminating its ranks (SIGTERM,
then SIGKILL 30 s later) and does not handle SIGUSR1 at all (it dies of it, and the ranks with it through
PR_SET_PDEATHSIG): a multi-process job then ends without a checkpoint and with 143 / 138. Here the agent is
told to leave the stop signals alone (``PET_SIGNALS_TO_HANDLE``, torchrun's list without them) and hands
each one it gets to every rank (its
children whose environment sets ``LOCAL_RANK``); it ends when the ranks have, and the launcher
(balagg.train.launch.run_launched) turns a stop into exit 75. The signal reaches the ranks the same way
whether it was sent to the launcher only or, as Slurm does, to every process of the job. A stop that comes
before any rank is running ends the launch at once, as an unhandled signal would. SIGINT, SIGHUP and
SIGQUIT keep torchrun's meaning: end every rank now.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys

from balagg.processes import STOP_SIGNALS, children_with_env

AGENT_SIGNALS = "SIGINT,SIGHUP,SIGQUIT"
"""The signals torchrun's agent handles itself (its default list without the stop signals)."""
RANK_ENV = "LOCAL_RANK"
"""Set by torchrun in the environment of each rank it starts, and in no other child of the agent."""


def pass_to_ranks(number: int, frame=None) -> None:
    """Signal handler of the agent: send ``number`` to every rank; with none running, die of it."""
    ranks = children_with_env(os.getpid(), RANK_ENV)
    if not ranks:
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        return
    for pid in ranks:
        try:
            os.kill(pid, number)
        except ProcessLookupError:  # the rank ended meanwhile
            pass


def main(argv: list[str]) -> None:
    os.environ["PET_SIGNALS_TO_HANDLE"] = AGENT_SIGNALS  # torchrun's --signals_to_handle, read from the env
    for number in STOP_SIGNALS:
        signal.signal(number, pass_to_ranks)
    sys.argv = [sys.argv[0], *argv]
    runpy.run_module("accelerate.commands.launch", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])

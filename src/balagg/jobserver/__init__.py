"""A local fork server for ``python -m balagg`` jobs: import the heavy stack once, fork one child per job.

Why: a workflow job of the embedded default does about as much work as it spends importing torch,
transformers, TRL and MLflow, in every one of its Python jobs (bench/startup.py measures the start-up,
bench/demo.py a campaign's served jobs; docs/performance.md). Under
``python -m balagg jobserver -- COMMAND`` (what ``make demo`` runs around Snakemake), every
``python -m balagg ARGS`` that COMMAND starts, however deep, hands its work to a child forked from a
process that has imported those packages already. The job runs the same ``balagg.cli.main(ARGS)`` as
it would in its own process; only the start-up is shared. The Slurm profile and plain ``snakemake``
runs do not use it.

Contract, for the process that Snakemake started (the *client*, ``python -m balagg ARGS``):

- its stdin, stdout and stderr (the file descriptors themselves), working directory, environment,
  ``sys.argv``, ``sys.path`` and umask become the job's;
- its exit status is the job's: an exit code, or death by the same signal when the job died of one;
- SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to it are sent on to the job; if it dies (``kill -9``), the
  server kills the job, so a killed job is a killed job, as without the server;
- it runs the job itself, in its own process, whenever the server cannot take it: no server at
  ``BALAGG_JOB_SERVER``, another interpreter, or an environment variable that the preloaded packages
  read when they are imported (``IMPORT_TIME_ENV``) that differs from the server's, such as a thread
  count other than Snakemake's default of 1 or a Slurm job's id. Nothing is done twice: the client
  runs the job itself only when it could not connect or the server said no (before forking anything);
  a server that goes away without an answer is an error (exit 1), not a reason to run it again.

The server forks only while it has a single thread, resets in the child what a fresh interpreter
would have (signal handlers, logging's root handlers, the temp-dir cache, the process group), and
never imports balagg's own pipeline modules, which each job imports for itself.

The package's modules: :mod:`~balagg.jobserver.protocol` (the socket messages both sides speak),
:mod:`~balagg.jobserver.client` (what ``python -m balagg`` does when :data:`SOCKET_ENV` is set) and
:mod:`~balagg.jobserver.server` (``python -m balagg jobserver``). A command run without a server reads
:data:`SOCKET_ENV` here and imports neither the client nor the server. docs/jobserver.md is its page.
"""

SOCKET_ENV = "BALAGG_JOB_SERVER"
"""The environment variable that names the server's Unix socket (set for COMMAND by the server); a
``python -m balagg`` process that finds it set offers its job to the server."""

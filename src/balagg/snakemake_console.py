"""The workflow's console: Snakemake's logger plugin ``balagg`` (``--logger balagg``, set in the workflow
profile), which shows a run's progress in a few lines and leaves the full log to Snakemake's log file.

Snakemake's own console prints a block per job (inputs, outputs, log, wildcards, resources: 1,600 lines
for the tiny-world demo) and a "k of N steps (x%) done" line after each job. ``--quiet progress`` hides
the progress with the blocks; ``--quiet rules`` still prints three lines per job, and the quiet settings
apply to the log file too. ``snakemake-logger-plugin-rich`` draws live progress bars, but only on a
terminal: piped into a file or a CI log it prints the job table and the last line, and no progress.

During a run this console prints instead:

- one line with the number of jobs to run per rule (Snakemake's "Job stats" table);
- progress: on a terminal one line, redrawn in place, with the jobs done, the jobs running and the last
  job finished; elsewhere a line at every tenth of the jobs and at least every
  :data:`QUIET_SECONDS` seconds while jobs finish, so a log shows how far a run got;
- every warning and error as Snakemake formats it (a failed job's block, with its log under
  ``--show-failed-logs``), and every message it does not know as noise (a Slurm submission, the workflow's
  own lines), with the path of the complete log at the end.

Dry runs print exactly what Snakemake's default console prints (its filter, formatter and stream), so
``snakemake -n`` still lists every job. A run prints no shell commands, even under ``-p`` (they are in the
log file); a run with no job to do prints its messages ("Nothing to be done ...") without the header and
routine lines.
Snakemake's log file (``.snakemake/log/``) is written by Snakemake itself, unfiltered by this console.
"""

from __future__ import annotations

import logging
import re
import sys
import time

from balagg.layout import SEED_PREFIX

QUIET_SECONDS = 60.0
"""Off a terminal, the longest a run goes without a progress line while jobs finish."""

MILESTONES = 10
"""Off a terminal, a progress line each time another tenth of the jobs is done."""

NOISE = re.compile(
    r"^(Building DAG of jobs|Using shell:|Select jobs to execute"
    r"|Execute \d+ jobs|Assuming unrestricted shared filesystem|Conda environments: ignored|host:"
    r"|Activating conda environment|Job stats:|Using workflow specific profile)")
"""Snakemake's routine info lines during a run: in the log file, not on the console."""


def _wildcards(wildcards) -> str:
    """A job's wildcards as the path they name: values joined by "/", a seed spelled as in a cell's folder
    (``seed0``, balagg.layout.CELL_PATTERN), so a train job reads as the cell its evaluation jobs name."""
    return "/".join(f"{SEED_PREFIX}{value}" if name == "seed" else str(value)
                    for name, value in (wildcards or {}).items())


class Console:
    """The console's state and rendering; :class:`LogHandler` (the plugin's handler) feeds it records.

    ``stream``: where Snakemake's default console would write; ``default``: Snakemake's default console
    handler on that stream (its filter, formatter and colours), which prints every record this console
    does not summarise; ``dryrun``: nothing runs, so every record goes to ``default``."""

    def __init__(self, stream, default: logging.Handler, dryrun: bool = False, interactive: bool | None = None,
                 clock=time.monotonic):
        self.stream = stream
        self.default = default
        self.dryrun = dryrun
        self.interactive = stream.isatty() if interactive is None else interactive
        self.clock = clock
        self.jobs: dict = {}  # jobid -> "rule wildcards"
        self.running: set = set()
        self.done = self.total = 0
        self.last_finished = ""
        self.printed_milestone = 0
        self.printed_at = clock()
        self.drawn = False  # a progress line is on the terminal, without its newline
        self.run = False  # a RUN_INFO came: jobs are running, so the compact console is on

    # ---- output

    def write_lines(self, text: str) -> None:
        """Print ``text`` above the progress line (a terminal's line is cleared and redrawn after)."""
        self.clear()
        self.stream.write(text.rstrip("\n") + "\n")
        self.stream.flush()
        self.draw()

    def clear(self) -> None:
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.drawn = False

    def draw(self) -> None:
        if self.interactive and self.run and self.total and self.done < self.total:
            self.stream.write("\r\x1b[K" + self.progress_line().rstrip()[: self.width() - 1])
            self.stream.flush()
            self.drawn = True

    def width(self) -> int:
        import shutil

        return shutil.get_terminal_size((120, 24)).columns

    def progress_line(self) -> str:
        percent = 100 * self.done // self.total if self.total else 100
        parts = []
        if self.running:
            rules: dict[str, int] = {}
            for jobid in self.running:
                rule = self.jobs.get(jobid, "?").split(" ")[0]
                rules[rule] = rules.get(rule, 0) + 1
            parts.append("running " + ", ".join(f"{rule} x{n}" if n > 1 else rule for rule, n in rules.items()))
        if self.last_finished:
            parts.append(f"done: {self.last_finished}")
        return f"[{self.done:>{len(str(self.total))}}/{self.total} jobs, {percent:>3}%] " + "; ".join(parts)

    # ---- records

    def handle(self, record: logging.LogRecord) -> None:
        from snakemake_interface_logger_plugins.common import LogEvent

        event = getattr(record, "event", None)
        if event == LogEvent.RUN_INFO and not self.dryrun and not self.run:
            self.start(getattr(record, "stats", {}) or {})
            return
        if self.dryrun:
            self.echo(record)
            return
        if event in (LogEvent.WORKFLOW_STARTED, LogEvent.RESOURCES_INFO, LogEvent.SHELLCMD, LogEvent.GROUP_INFO,
                     LogEvent.JOB_STARTED, LogEvent.RULEGRAPH) or (
                event is None and record.levelno < logging.WARNING and NOISE.match(record.getMessage().strip())):
            return  # the header, the resources, shell commands and routine lines: in the log file
        if not self.run:
            self.echo(record)
            return
        if event == LogEvent.JOB_INFO:
            self.jobs[record.jobid] = f"{record.rule_name} {_wildcards(record.wildcards)}".strip()
            self.running.add(record.jobid)
            self.draw()
        elif event == LogEvent.JOB_FINISHED:
            self.running.discard(record.job_id)
            self.last_finished = self.jobs.get(record.job_id, "")
        elif event == LogEvent.PROGRESS:
            self.progress(int(record.done), int(record.total))
        elif event in (LogEvent.JOB_ERROR, LogEvent.GROUP_ERROR):
            self.running.discard(getattr(record, "jobid", None))
            self.echo(record)
        elif event == LogEvent.RUN_INFO:
            pass  # the job stats again (a checkpoint re-evaluated the DAG); PROGRESS carries the new total
        else:
            self.echo(record)

    def start(self, stats: dict) -> None:
        """A run begins (Snakemake's job stats): one line of what it will do; the compact console is on."""
        self.run = True
        self.total = int(stats.get("total", 0))
        counts = ", ".join(f"{rule} {n}" for rule, n in stats.items() if rule != "total")
        self.printed_at = self.clock()
        self.write_lines(f"{self.total} jobs to run: {counts}" if self.total else "no jobs to run")

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        if self.interactive and done < total:
            self.draw()
            return
        if self.interactive:  # the last job: the line stays, above what Snakemake prints at the end
            self.write_lines(self.progress_line().rstrip())
            return
        milestone = MILESTONES * done // total if total else MILESTONES
        now = self.clock()
        if milestone > self.printed_milestone or done == total or now - self.printed_at >= QUIET_SECONDS:
            self.printed_milestone, self.printed_at = milestone, now
            self.write_lines(self.progress_line().rstrip())

    def echo(self, record: logging.LogRecord) -> None:
        """``record`` as Snakemake's default console prints it (above the progress line)."""
        self.clear()
        self.default.handle(record)
        self.draw()

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def default_handler(settings, stream) -> logging.Handler:
    """Snakemake's default console handler for ``settings`` (as ``snakemake.logging.LoggerManager``
    builds it when no logger plugin writes to the stream)."""
    from snakemake.logging import ColorizingTextHandler, DefaultFilter, DefaultFormatter

    return ColorizingTextHandler(
        nocolor=settings.nocolor, stream=stream,
        formatter=DefaultFormatter(settings.quiet, settings.show_failed_logs),
        filter=DefaultFilter(settings.quiet, settings.debug_dag, settings.verbose, settings.dryrun,
                             settings.printshellcmds))


def _handler_class():
    from snakemake_interface_logger_plugins.base import LogHandlerBase

    class LogHandler(LogHandlerBase):
        """The plugin's handler: a :class:`Console` on Snakemake's console stream."""

        def __post_init__(self) -> None:
            stream = sys.stdout if self.common_settings.stdout else sys.stderr
            self.console = Console(stream, default_handler(self.common_settings, stream),
                                   dryrun=self.common_settings.dryrun)

        def emit(self, record: logging.LogRecord) -> None:
            try:
                self.console.handle(record)
            except Exception:  # noqa: BLE001 - a console error must not stop the workflow
                self.handleError(record)

        def close(self) -> None:
            self.console.close()
            super().close()

        @property
        def writes_to_stream(self) -> bool:
            return True

        @property
        def writes_to_file(self) -> bool:
            return False

        @property
        def has_filter(self) -> bool:
            return True

        @property
        def has_formatter(self) -> bool:
            return True

        @property
        def needs_rulegraph(self) -> bool:
            return False

    return LogHandler


LogHandler = _handler_class()

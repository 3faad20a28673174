"""MLflow as a window onto the files: one run per cell, never a reason to stop or slow training.

``Tracker(uri, ...)`` does nothing when ``uri`` is None. Otherwise it starts (or, given a stored run id,
resumes) one MLflow run, and every later call is best-effort: the first failure logs one warning and
switches tracking off for the rest of the process, so the files (metrics.jsonl, manifest.json) remain
the source of truth. HTTP servers are probed once with a short timeout before anything else, and
MLflow's own HTTP retries are capped, so an unreachable server costs seconds, not minutes.
"""

from __future__ import annotations

import logging
import math
import os
import urllib.error
import urllib.request
from typing import Any

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0


def _reachable(uri: str) -> bool:
    """False for an http(s) URI whose server does not answer within PROBE_TIMEOUT_S; True otherwise."""
    if not uri.startswith(("http://", "https://")):
        return True
    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=PROBE_TIMEOUT_S)
    except urllib.error.HTTPError:
        return True  # it answered
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return True


class Tracker:
    def __init__(self, uri: str | None) -> None:
        self.uri = uri
        self.run_id: str | None = None
        self.active = False
        self._mlflow = None

    def _disable(self, what: str, error: BaseException) -> None:
        log.warning("MLflow %s failed (%s: %s); tracking is off for this run, files are kept",
                    what, type(error).__name__, error)
        self.active = False

    def start(self, *, experiment: str, run_name: str, run_id: str | None, tags: dict[str, str],
              params: dict[str, Any]) -> str | None:
        """Start or resume the cell's run; returns its id (None if tracking is off or failed)."""
        if self.uri is None:
            return None
        if not _reachable(self.uri):
            log.warning("MLflow tracking server %s is unreachable; tracking is off for this run, files are kept",
                        self.uri)
            return None
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        try:
            import mlflow

            self._mlflow = mlflow
            mlflow.set_tracking_uri(self.uri)
            if run_id is None:
                mlflow.set_experiment(experiment)
                run = mlflow.start_run(run_name=run_name, tags=tags)
                flat = {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v))
                        for k, v in params.items()}
                mlflow.log_params(flat)
            else:
                run = mlflow.start_run(run_id=run_id)
            self.run_id = run.info.run_id
            self.active = True
        except Exception as error:
            self._disable("start", error)
        return self.run_id

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        if not self.active:
            return
        finite = {k: float(v) for k, v in metrics.items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "step"}
        try:
            self._mlflow.log_metrics(finite, step=step)
        except Exception as error:
            self._disable("log_metrics", error)

    def end(self, status: str = "FINISHED") -> None:
        if not self.active:
            return
        try:
            self._mlflow.end_run(status=status)
        except Exception as error:
            self._disable("end_run", error)
        self.active = False

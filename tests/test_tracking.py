"""MLflow being unreachable costs a warning, never the run."""

from __future__ import annotations

import logging
import time

from balagg.tracking import Tracker


def test_no_uri_means_no_tracking():
    tracker = Tracker(None)
    assert tracker.start(experiment="e", run_name="r", run_id=None, tags={}, params={}) is None
    tracker.log_metrics({"x": 1.0}, step=1)  # a no-op, no error
    tracker.end()


def test_unreachable_server_warns_and_switches_tracking_off(caplog):
    tracker = Tracker("http://127.0.0.1:9")  # discard port: nothing listens
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="balagg.tracking"):
        run_id = tracker.start(experiment="e", run_name="r", run_id=None, tags={}, params={"a": 1})
    assert run_id is None and not tracker.active
    assert "unreachable" in caplog.text
    assert time.monotonic() - start < 10
    tracker.log_metrics({"x": 1.0}, step=1)
    tracker.end()

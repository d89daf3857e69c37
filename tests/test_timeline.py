"""``tests/timeline.py``: each worker's busy seconds, the longest modules, every phase kept."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from timeline import Timeline, read


def _report(nodeid, when, worker, start, seconds):
    return SimpleNamespace(nodeid=nodeid, when=when, worker_id=worker, start=start, stop=start + seconds)


def test_each_worker_busy_seconds_and_when_it_ran_out_of_work(tmp_path):
    timeline = Timeline(started=1000.0)
    timeline.add(_report("tests/a/test_x.py::test_1", "setup", "gw0", 1001.0, 30.0))
    timeline.add(_report("tests/a/test_x.py::test_1", "call", "gw0", 1031.0, 10.0))
    timeline.add(_report("tests/b/test_y.py::test_2", "call", "gw1", 1002.0, 5.0))
    timeline.add(_report("tests/b/test_y.py::test_3", "call", "gw0", 1041.0, 1.0))
    timeline.add(SimpleNamespace(nodeid="tests/c.py::t", when="call", worker_id="gw1"))  # no clock: not counted

    assert timeline.workers() == {"gw0": {"busy": 41.0, "first": 1.0, "last": 42.0},
                                  "gw1": {"busy": 5.0, "first": 2.0, "last": 7.0}}
    assert timeline.modules() == [("tests/a/test_x.py", 40.0, "gw0"), ("tests/b/test_y.py", 6.0, "several")]
    lines = timeline.summary(ended=1050.0)
    assert lines[0].startswith("wall 50 s")
    assert lines[1] == "gw0: busy 41 s (82% of the wall), first test at 1 s, last done at 42 s"
    assert lines[3].split() == ["40.0", "s", "tests/a/test_x.py", "(gw0)"]



def test_each_phase_is_kept_as_it_arrives_and_read_back(tmp_path):
    kept = tmp_path / "timeline.jsonl"
    timeline = Timeline(started=1000.0, path=kept)
    timeline.add(_report("tests/a/test_x.py::test_1", "setup", "gw0", 1001.0, 30.0))
    lines = [json.loads(line) for line in kept.read_text().splitlines()]
    assert lines == [{"started": 1000.0}, {"nodeid": "tests/a/test_x.py::test_1", "when": "setup", "worker": "gw0",
                                           "start": 1001.0, "seconds": 30.0}]  # a run stopped here still shows it
    timeline.add(_report("tests/b/test_y.py::test_2", "call", "gw1", 1002.0, 5.0))
    again = read(kept)
    assert (again.started, again.phases) == (timeline.started, timeline.phases)
    assert again.summary(ended=1050.0) == timeline.summary(ended=1050.0)
    other = tmp_path / "other.jsonl"
    other.write_text("{}\n")
    with pytest.raises(ValueError, match="not a test timeline"):
        read(other)


def test_a_run_without_xdist_is_one_worker():
    timeline = Timeline(started=0.0)
    timeline.add(SimpleNamespace(nodeid="tests/test_z.py::t", when="call", start=1.0, stop=3.0))
    assert list(timeline.workers()) == ["main"]

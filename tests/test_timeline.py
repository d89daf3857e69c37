"""``tests/timeline.py``: each worker's busy seconds, the longest modules, every phase kept."""
from __future__ import annotations

import json
from types import SimpleNamespace

from timeline import Timeline


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

    kept = json.loads(timeline.write(tmp_path / "t.json").read_text())
    assert kept["started"] == 1000.0 and len(kept["phases"]) == 4
    assert kept["phases"][0] == {"nodeid": "tests/a/test_x.py::test_1", "when": "setup", "worker": "gw0",
                                 "start": 1001.0, "seconds": 30.0}


def test_a_run_without_xdist_is_one_worker():
    timeline = Timeline(started=0.0)
    timeline.add(SimpleNamespace(nodeid="tests/test_z.py::t", when="call", start=1.0, stop=3.0))
    assert list(timeline.workers()) == ["main"]

"""Smoke test of the benchmarks (no assertion on time: only that they run and report)."""
import json

import pytest
import torch

from solutions.bench import run_benchmarks
from solutions.cli import main


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One intra-op thread per test: small ops gain nothing from more, and on a shared
    machine (or beside another xdist worker) extra threads only contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_quick_bench_reports_ratios(tmp_path):
    lines = []
    results = run_benchmarks(quick=True, device="cpu", json_path=tmp_path / "bench.json", out=lines.append)
    assert results["training_step"]["ratio"] > 0 and results["kv_cache"]["ratio"] > 0
    assert results["kv_cache"]["same_tokens"] is True and results["kv_cache"]["new_tokens"] == 8
    assert any("throughput ratio" in line for line in lines)
    assert json.loads((tmp_path / "bench.json").read_text())["training_step"]["ratio"] > 0


def test_bench_command_with_cpu_clock(capsys):
    torch.set_num_threads(2)
    assert main(["bench", "--quick", "--device", "cpu", "--clock", "cpu", "--threads", "1"]) == 0
    assert "1 threads, cpu clock" in capsys.readouterr().out
    assert torch.get_num_threads() == 2  # restored after the run

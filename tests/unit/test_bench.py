"""Smoke test of the benchmarks (no assertion on time: only that they run and report)."""
import json

from solutions.bench import run_benchmarks
from solutions.cli import main


def test_quick_bench_reports_ratios(tmp_path):
    lines = []
    results = run_benchmarks(quick=True, device="cpu", json_path=tmp_path / "bench.json", out=lines.append)
    assert results["training_step"]["ratio"] > 0 and results["kv_cache"]["ratio"] > 0
    assert results["kv_cache"]["same_tokens"] is True and results["kv_cache"]["new_tokens"] == 8
    assert any("throughput ratio" in line for line in lines)
    assert json.loads((tmp_path / "bench.json").read_text())["training_step"]["ratio"] > 0


def test_bench_command_with_cpu_clock(capsys):
    assert main(["bench", "--quick", "--device", "cpu", "--clock", "cpu", "--threads", "1"]) == 0
    assert "cpu clock" in capsys.readouterr().out

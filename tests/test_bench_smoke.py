"""Each benchmark of bench/ runs from its one command and prints its table (tiny sizes here; the
README's figures come from the default sizes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def bench(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"bench/{script}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_compare_schedulers_prints_the_three_variants():
    run = bench("compare_schedulers.py", "--repeat", "1", "--days", "1", "--categories", "A,D,E")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    table = run.stdout[run.stdout.index("variant"):]
    for label in ("plain Scrapy", "scrapy-redis 0.9.1", "ours (LeasedScheduler)"):
        assert label in table
    assert "Redis round trips per page" in table


def test_dedupe_memory_prints_bytes_per_fingerprint_and_the_false_drop_rate():
    run = bench("dedupe_memory.py", "--count", "300000", "--insert", "30000", "--probe", "10000",
                "--set-count", "20000", "--weak-probe", "20000")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "target: <= 24 bytes per fingerprint at 300,000" in run.stdout
    assert "scrapy-redis SET" in run.stdout


def test_scaling_prints_both_runs_and_each_stored_the_truth():
    run = bench("scaling.py", "--days", "1", "--workers", "2", "--scale", "0.05")
    assert "speed-up" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    rows = [line for line in run.stdout.splitlines() if line.rstrip().endswith("= truth")]
    assert len(rows) == 2, run.stdout[-3000:]

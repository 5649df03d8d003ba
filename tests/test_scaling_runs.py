"""The scaling lab on real jobs: a sweep through the CLI, its report, the allreduce benchmark
on both engines, and the Horovod timeline. Each job is small (a few seconds on 2 cores).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import workbench
from workbench.scaling import timeline as tl
from workbench.ui.scaling_report import CHART_TITLES
from workbench.ui.timeline_charts import breakdown_figures, gantt_figure

pytestmark = pytest.mark.timeout(240)


def cli(*args: str, timeout: float = 200) -> subprocess.CompletedProcess:
    """Run ``workbench ARGS`` in a fresh interpreter, as a user would."""
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_strong_sweep_through_cli_writes_table_json_and_report(tmp_path: Path):
    report = tmp_path / "report.html"
    out = cli("scale", "--engine", "horovod", "--np", "1,2", "--mode", "strong",
              "--model", "mlp", "--dataset", "digits", "--epochs", "1", "--batch-size", "32",
              "--max-steps", "20",
              "--runs-dir", str(tmp_path / "runs"), "--report", str(report), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)                       # exactly one JSON document
    rows = doc["rows"]
    assert [r["np"] for r in rows] == [1, 2]
    for r in rows:
        assert set(r) == {"np", "time_s", "samples_per_s", "speedup", "efficiency", "karp_flatt"}
        assert r["time_s"] > 0 and r["samples_per_s"] > 0
        assert r["efficiency"] == pytest.approx(r["speedup"] / r["np"])
    assert rows[0]["speedup"] == 1.0 and rows[0]["karp_flatt"] is None
    s = rows[1]["speedup"]
    assert rows[1]["karp_flatt"] == pytest.approx((1 / s - 1 / 2) / (1 - 1 / 2))
    # strong scaling: the np=2 run split the global batch of 32 into 16 per rank
    configs = [json.loads((tmp_path / "runs" / r / "config.json").read_text())
               for r in doc["runs"]]
    assert [(c["np"], c["batch_size"], c["threads_per_rank"]) for c in configs] == [
        (1, 32, 1), (2, 16, 1)]
    html = report.read_text()
    for title in CHART_TITLES:
        assert f'"text":"{title}"' in html.replace(" ", ""), title
    assert "cdn.bokeh.org" not in html                 # BokehJS inlined: opens offline
    assert "per-worker resources constant" in html


def test_scale_usage_errors_exit_2_without_traceback(tmp_path: Path):
    for args, message in [
        (["--np", "1,two"], "bad worker count 'two'"),
        (["--np", "1,3", "--batch-size", "32"], "cannot be split evenly over 3 ranks"),
        (["--mode", "sideways"], "invalid choice"),
    ]:
        out = cli("scale", *args, "--runs-dir", str(tmp_path))
        assert out.returncode == 2, (args, out.stderr)
        assert message in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("engine", ["horovod", "torch"])
def test_bench_allreduce_on_real_ranks(engine: str, tmp_path: Path):
    out = cli("bench", "allreduce", "--engine", engine, "--np", "2", "--sizes", "4KB,256KB,1MB",
              "--budget-s", "0.1", "--runs-dir", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [r["size_bytes"] for r in doc["rows"]] == [4096, 256 * 1024, 1 << 20]
    for r in doc["rows"]:
        assert r["time_s"] > 0
        assert r["algbw_GBps"] == pytest.approx(r["size_bytes"] / r["time_s"] / 1e9)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * (2 - 1) / 2)
    assert doc["alpha_s"] is not None and doc["alpha_s"] >= 0
    assert doc["beta_s_per_byte"] is not None and doc["beta_s_per_byte"] >= 0
    # every rank reported success and left its exit record
    run_dir = tmp_path / doc["run_id"]
    assert all(json.loads(f.read_text())["ok"] for f in (run_dir / "exit").glob("rank*.json"))


def test_bench_rejects_one_rank_and_bad_sizes(tmp_path: Path):
    out = cli("bench", "allreduce", "--np", "1", "--runs-dir", str(tmp_path))
    assert out.returncode == 2 and "at least 2 ranks" in out.stderr
    out = cli("bench", "allreduce", "--sizes", "4 parsecs", "--runs-dir", str(tmp_path))
    assert out.returncode == 2 and "--sizes" in out.stderr and "Traceback" not in out.stderr


def test_horovod_timeline_gantt_and_breakdown(tmp_path: Path):
    job = workbench.start(workbench.JobConfig(
        engine="horovod", np=2, model="mlp", dataset="digits", epochs=1, max_steps=15,
        threads_per_rank=1, timeline=True, runs_dir=str(tmp_path)))
    assert job.wait(180) == "succeeded", job.summary
    timeline = tl.load_timeline(job.run_dir / "timeline.json")
    assert timeline.ranks == [0, 1]
    assert any(op.name == "ALLREDUCE" for op in timeline.operations)
    tasks = tl.rank_activities(timeline)
    shares = tl.time_shares(tasks)
    assert set(shares) == {"rank 0", "rank 1"}
    for lane in shares.values():
        assert lane["allreduce"] > 0 and lane["compute"] > 0
    # the painted strip of each rank covers the timeline without gaps or overlaps
    for lane in ("rank 0", "rank 1"):
        strip = sorted((t["start"], t["end"]) for t in tasks if t["lane"] == lane)
        assert all(a[1] == pytest.approx(b[0]) for a, b in zip(strip, strip[1:], strict=False))
    fig = gantt_figure(timeline)
    assert list(fig.y_range.factors) == ["rank 1", "rank 0"]

    out = cli("timeline", job.run_id, "--runs-dir", str(tmp_path), "--json",
              "--html", str(tmp_path / "tl.html"))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc["timeline"]) == {"rank 0", "rank 1"}
    assert len(doc["steps"]["step"]) == 15
    assert "Where the time goes" in (tmp_path / "tl.html").read_text()


def test_compute_sync_breakdown_of_a_ddp_run(warm):
    """Rank 1 straggles (0.05 s more per step, after its backward pass): DDP's reducer
    holds rank 0's next backward pass until rank 1's gradients arrive, which rank 0's
    lines show as synchronization, and rank 1's as computing."""
    runs = warm("torch") / "runs"  # on warm ranks (conftest.py): the steps are the same
    job = workbench.start(workbench.JobConfig(
        engine="torch", np=2, model="mlp", dataset="digits", epochs=1, max_steps=10,
        threads_per_rank=1, cpu_bind="none", runs_dir=str(runs), straggler_rank=1,
        straggler_delay=0.05))
    assert job.wait(180) == "succeeded", job.summary
    assert job.summary.get("pool"), "a call on the warm ranks"
    metrics = job.metrics()
    cols = tl.step_breakdown(metrics)
    assert cols["step"] == list(range(1, 11))
    assert all(c > 0 for c in cols["compute_s"]) and all(s >= 0 for s in cols["sync_s"])
    later = [m for m in metrics if m.get("kind") == "step" and m["step"] > 0]
    fast, slow = ([m for m in later if m["rank"] == r] for r in (0, 1))
    assert statistics.fmean(m["sync_s"] for m in fast) > 0.03
    assert statistics.fmean(m["compute_s"] for m in fast) < 0.03
    assert statistics.fmean(m["compute_s"] for m in slow) > 0.05
    ranks = tl.rank_breakdown(metrics)
    assert list(ranks) == ["rank 0", "rank 1"]
    # the per-rank totals are the sums of that rank's step lines
    mine = [m for m in metrics if m.get("kind") == "step" and m["rank"] == 1]
    assert ranks["rank 1"]["sync"] == pytest.approx(sum(m["sync_s"] for m in mine))
    per_step, per_rank = breakdown_figures(metrics)
    assert list(per_rank.x_range.factors) == ["rank 0", "rank 1"]
    out = cli("timeline", job.run_id, "--runs-dir", str(runs))
    assert out.returncode == 0 and "no Horovod timeline" in out.stdout

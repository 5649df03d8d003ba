"""The live panels, headless: real Horovod jobs, real metrics, no browser.

The panels are driven the way a kernel drives them: a button ``click()`` and then either the
asyncio loop (as in Jupyter) or explicit ``refresh()`` calls.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from _session_pools import live_rank_pids

from workbench.records import MetricsReader
from workbench.records.liveness import process_alive as pid_alive
from workbench.ui import ScalingPanel, TrainingPanel, charts
from workbench.ui.run_charts import RunCharts

SMALL = dict(engine="horovod", np=2, model="mlp", dataset="digits", epochs=1, batch_size=32,
             threads_per_rank=1)


def _wait(predicate, timeout_s: float, step_s: float = 0.25, tick=None) -> bool:
    """Poll ``predicate`` (calling ``tick`` first each time) until true or timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if tick:
            tick()
        if predicate():
            return True
        time.sleep(step_s)
    return False


def _text(widget) -> str:
    return widget.value


# ---------------------------------------------------------------------- no processes


def test_run_charts_turn_rows_into_per_rank_and_overall_series():
    rc = RunCharts(np=2)
    rows = []
    for step in range(3):
        for rank in range(2):
            rows.append({"kind": "step", "rank": rank, "epoch": 0, "step": step,
                         "loss": 1.0 + rank + step, "accuracy": 0.5 * rank, "samples": 10,
                         "time": 1.0 + step + 0.1 * rank, "compute_s": 0.3, "sync_s": 0.1 * rank})
    assert rc.add(rows[:1]) == 1
    assert len(rc.sources["rank0"].data["loss"]) == 1
    assert rc.sources["overall"].data["loss"] == []          # rank 1 has not reported step 0
    rc.add(rows[1:])
    overall = rc.sources["overall"].data
    assert overall["loss"] == [1.5, 2.5, 3.5]                # mean of the two ranks
    assert overall["time"] == [1.1, 2.1, 3.1]                # the slower rank ends the step
    # samples/s: 2 ranks x 10 samples per step over the last two steps' span (2 s)
    assert overall["samples_per_s"][-1] == pytest.approx(40 / 2.0)
    share = rc.sources["share"].data
    assert share["compute"] == [1.0, pytest.approx(0.75)]
    assert share["sync"] == [0.0, pytest.approx(0.25)]
    assert rc.add([{"kind": "step", "rank": 7, "epoch": 0, "step": 0}]) == 0   # not a rank


def test_chart_helpers_build_gantt_and_bars():
    fig, src = charts.gantt([{"lane": "rank 0", "start": 0, "end": 1.5, "kind": "compute"},
                             {"lane": "rank 1", "start": 1.0, "end": 2.0, "kind": "sync"}],
                            "timeline", y_label="rank")
    assert list(fig.y_range.factors) == ["rank 1", "rank 0"]    # first lane on top
    assert src.data["duration"] == [1.5, 1.0]
    assert src.data["color"] == [charts.kind_color("compute"), charts.kind_color("sync")]
    _, bars = charts.stacked_bar(["a", "b"], {"x": [1, 2], "y": [3, 4]}, "t", x_label="run",
                                 y_label="s")
    assert bars.data["y"] == [3, 4]
    assert charts.to_widget(fig).render_bundle["docs_json"]


def test_the_stacks_of_one_chart_never_share_a_colour():
    kinds = ["params", "grads", "optimizer", "activations"]
    assert charts.kind_color("grads") == charts.kind_color("activations")  # the hash collides
    fig, _ = charts.stacked_bar(["dp", "mp"], {k: [1, 2] for k in kinds}, "t", x_label="run",
                                y_label="MiB")
    drawn = [r.glyph.fill_color for r in fig.renderers]
    assert len(set(drawn)) == len(kinds)
    assert drawn[:3] == [charts.kind_color(k) for k in kinds[:3]]   # stable where they can be
    assert charts.kind_colors(["sync", "x"], {"x": "#000000"}) == [charts.kind_color("sync"),
                                                                    "#000000"]


def test_training_panel_refuses_bad_values(tmp_path):
    panel = TrainingPanel(runs_dir=str(tmp_path), **SMALL)
    try:
        for name, bad, expected in [("np", 0, "--np 0"), ("lr", -1.0, "--lr -1.0"),
                                    ("epochs", 0, "--epochs 0")]:
            good = panel.controls[name].value
            panel.controls[name].value = bad
            panel.start_button.click()
            assert "not valid" in _text(panel.status)
            assert expected in _text(panel.alert), _text(panel.alert)
            assert panel.job is None
            panel.controls[name].value = good
        panel.controls["dataset"].value = "digits"
        panel.controls["model"].value = "cnn"                 # a CNN needs image data
        panel.start_button.click()
        assert "--model &#x27;cnn&#x27;" in _text(panel.alert)
        assert not any(tmp_path.iterdir()), "a refused job must not create a run folder"
    finally:
        panel.close()
    with pytest.raises(Exception, match="unknown configuration field"):
        TrainingPanel(runs_dir=str(tmp_path), nprocs=2)


def test_both_panels_offer_the_naive_engine(tmp_path):
    panels = [TrainingPanel(runs_dir=str(tmp_path), **{**SMALL, "engine": "naive"}),
              ScalingPanel(runs_dir=str(tmp_path), engine="naive")]
    try:
        for panel in panels:
            assert panel.controls["engine"].value == "naive"
            assert {"naive", "torch", "horovod"} <= set(panel.controls["engine"].options)
        assert panels[0].config().engine == "naive"
    finally:
        for panel in panels:
            panel.close()


def test_scaling_panel_refuses_bad_worker_counts(tmp_path):
    panel = ScalingPanel(runs_dir=str(tmp_path))
    try:
        for bad in ("", "1,two", "0,2", "2,2"):
            panel.controls["np_values"].value = bad
            panel.run_button.click()
            assert "not valid" in _text(panel.status) and "worker counts" in _text(panel.alert)
            assert not panel.running()
    finally:
        panel.close()


def test_scaling_panel_says_why_it_draws_no_fit_when_a_run_got_slower(tmp_path):
    """The rows of a comm-bound sweep that got slower at 2 workers, shown headlessly."""
    from workbench.scaling import metrics

    panel = ScalingPanel(runs_dir=str(tmp_path))
    try:
        panel.show_rows(metrics.scaling_rows([1, 2], [10.0, 33.3], [100.0, 30.0]))
        note = _text(panel.note)
        assert "slower than one worker: communication costs more than it saves" in note.lower()
        assert "Karp–Flatt e = 5.67" in note and "No Amdahl fit is drawn" in note
        assert panel.sources["fit"].data["x"] == []
        assert "<td>5.667</td>" in _text(panel.table)
        panel.show_rows(metrics.scaling_rows([1, 2, 4], [10.0, 5.5, 3.25],
                                             [100.0, 100 / 0.55, 100 / 0.325]))
        assert _text(panel.note) == "" and len(panel.sources["fit"].data["x"]) > 0
    finally:
        panel.close()


# ---------------------------------------------------------------------- real Horovod jobs


@pytest.mark.timeout(240)
def test_training_panel_live_on_the_event_loop(tmp_path):
    """Start from a click inside a running asyncio loop, as in a kernel: the panel's own task
    fills the charts while the loop stays free for other events."""
    panel = TrainingPanel(runs_dir=str(tmp_path), refresh_s=0.1, **SMALL)
    seen_during_run: list[int] = []
    worst_lag_s = 0.0

    async def drive() -> None:
        nonlocal worst_lag_s
        panel.start_button.click()                       # must return at once
        assert panel.running() and panel._task is not None
        panel.start_button.click()                       # a second Start is refused
        assert "already running" in _text(panel.status)
        deadline = time.monotonic() + 180
        while panel.running() and time.monotonic() < deadline:
            t0 = time.monotonic()
            await asyncio.sleep(0.05)                    # a widget event would wait like this
            worst_lag_s = max(worst_lag_s, time.monotonic() - t0 - 0.05)
            seen_during_run.append(len(panel.sources["overall"].data["loss"]))
        await asyncio.wait_for(panel._task, 10)

    try:
        asyncio.run(drive())
        assert panel.job.status == "succeeded", _text(panel.alert)
        assert "succeeded" in _text(panel.status)
        assert 0 < max(seen_during_run[:-1]), "the charts must fill while the job runs"
        assert worst_lag_s < 1.0, f"the event loop was blocked for {worst_lag_s:.2f} s"

        records = MetricsReader(panel.job.run_dir).all()
        steps = [r for r in records if r["kind"] == "step"]
        for rank in (0, 1):
            mine = [r["loss"] for r in steps if r["rank"] == rank]
            assert panel.sources[f"rank{rank}"].data["loss"] == mine
        by_step = {}
        for r in steps:
            by_step.setdefault(r["step"], []).append(r["loss"])
        expected = [sum(v) / 2 for _, v in sorted(by_step.items())]
        assert panel.sources["overall"].data["loss"] == pytest.approx(expected)
        share = panel.sources["share"].data
        assert all(0 < c <= 1 for c in share["compute"])
        assert share["compute"][0] + share["sync"][0] == pytest.approx(1.0)
        assert panel.progress.value == panel.progress.max == len(by_step)
        assert "rank 0" in " ".join(panel.logs.titles)

        # the run picker reopens the same run from its record, in a new panel
        again = TrainingPanel(runs_dir=str(tmp_path), np=1)
        try:
            assert again.run_picker.value == str(panel.job.run_dir)
            again.open_run(again.run_picker.value)
            assert again.controls["np"].value == 2
            assert again.sources["rank1"].data["loss"] == panel.sources["rank1"].data["loss"]
            assert "succeeded" in _text(again.status)
        finally:
            again.close()
    finally:
        panel.close()
    assert not live_rank_pids(panel.job.run_dir)


@pytest.mark.timeout(180)
def test_training_panel_stop_and_close_leave_no_rank(tmp_path):
    panel = TrainingPanel(runs_dir=str(tmp_path), **{**SMALL, "epochs": 50})
    try:
        panel.start_button.click()
        assert _wait(lambda: len(panel.sources["rank0"].data["loss"]) > 0, 120,
                     tick=panel.refresh), _text(panel.status)
        run_dir = panel.job.run_dir
        assert panel.start_button.disabled and not panel.stop_button.disabled
        other = TrainingPanel(runs_dir=str(tmp_path), np=1)   # another notebook opens it
        try:
            other.open_run(str(run_dir))
            assert "still running elsewhere" in _text(other.status), _text(other.status)
            assert not _text(other.alert)        # no failure box, no "unknown"
            assert panel.job.status == "running"
        finally:
            other.close()
        panel.stop_button.click()
        assert panel.job.status == "stopped"
        assert "stopped" in _text(panel.status)
        assert not panel.start_button.disabled and panel.stop_button.disabled
        assert not live_rank_pids(run_dir)
        panel.stop_button.click()
        assert "No job is running" in _text(panel.status)

        # closing the panel while a job runs stops it
        panel.start_button.click()
        job = panel.job
        assert _wait(lambda: len(list((job.run_dir / "pids").glob("*.pid"))) == 2, 60)
    finally:
        panel.close()
    assert job.status == "stopped"
    assert not live_rank_pids(job.run_dir)


@pytest.mark.timeout(120)
def test_training_panel_shows_the_failed_rank_and_its_log(tmp_path):
    # 1797 digits cannot fill one global batch of 2 x 5000: every rank raises at start
    panel = TrainingPanel(runs_dir=str(tmp_path), **{**SMALL, "batch_size": 5000})
    try:
        panel.start_button.click()
        assert _wait(lambda: not panel.running(), 100, tick=panel.refresh)
        assert panel.job.status == "failed"
        assert "failed" in _text(panel.status)
        alert = _text(panel.alert)
        assert "fewer than one global batch" in alert
        assert "last lines of the log of rank" in alert and "Traceback" in alert
    finally:
        panel.close()


@pytest.mark.timeout(240)
def test_scaling_panel_runs_a_sweep_and_plots_each_point(tmp_path):
    panel = ScalingPanel(np_values="1,2", preset="comm-bound", mode="strong",
                         runs_dir=str(tmp_path), epochs=1, max_steps=15)
    try:
        panel.run_button.click()
        assert panel.running()
        first = panel.job
        assert _wait(lambda: len(panel.points) == 1, 120, tick=panel.refresh)
        assert panel.sources["points"].data["np"] == [1]      # plotted before run 2 ends
        assert panel.running() and panel.job is not first
        assert _wait(lambda: not panel.running(), 120, tick=panel.refresh)
        assert "Sweep finished" in _text(panel.status), _text(panel.alert)
        pts = panel.sources["points"].data
        assert pts["np"] == [1, 2]
        sps = [p.samples_per_s for p in panel.points]
        assert pts["speedup"] == pytest.approx([1.0, sps[1] / sps[0]])
        assert pts["efficiency"][1] == pytest.approx(pts["speedup"][1] / 2)
        # the fitted law is drawn, unless 2 workers were slower than one: then the note says so
        got_slower = pts["speedup"][1] < 1
        assert (len(panel.sources["fit"].data["x"]) == 0) == got_slower
        assert ("costs more than it saves" in _text(panel.note)) == got_slower
        assert "Karp–Flatt" in _text(panel.table) and "<td>2</td>" in _text(panel.table)
        cfgs = [json.loads((Path(p.summary["run_dir"]) / "config.json").read_text())
                for p in panel.points]
        assert [c["np"] for c in cfgs] == [1, 2]
        assert cfgs[0]["batch_size"] == 2 * cfgs[1]["batch_size"]   # strong: global batch kept
    finally:
        panel.close()


@pytest.mark.timeout(180)
def test_kernel_restart_leaves_no_rank_running(tmp_path, monkeypatch):
    """A student restarts the kernel mid-run: the launcher and every rank must end too."""
    # The kernel queues in a core queue of its own: its job's state is out of sight here,
    # and behind other tests' jobs the fixed wait for its ranks below would fail.
    monkeypatch.setenv("WORKBENCH_SHARED_DIR", str(tmp_path / "shared"))
    from jupyter_client.manager import start_new_kernel

    code = (
        "import json\n"
        "from workbench.ui import TrainingPanel\n"
        f"panel = TrainingPanel(runs_dir={str(tmp_path)!r}, engine='horovod', np=2,"
        " model='mlp', dataset='digits', epochs=500, threads_per_rank=1)\n"
        "panel.start_button.click()\n"
        "print(json.dumps({'run_dir': str(panel.job.run_dir)}))\n")
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        out: list[str] = []
        kc.execute_interactive(code, timeout=60, output_hook=lambda m: out.append(
            m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
        info = json.loads("".join(out).strip().splitlines()[-1])
        run_dir = Path(info["run_dir"])
        assert _wait(lambda: len(live_rank_pids(run_dir)) == 2, 90), "ranks did not start"
        # Asked only now: a job that queued for cores had no launcher when it was started.
        out.clear()
        kc.execute_interactive("print(panel.job.launcher_pid)", timeout=30,
                               output_hook=lambda m: out.append(m["content"].get("text", ""))
                               if m["msg_type"] == "stream" else None)
        info["launcher"] = int("".join(out).strip())
        km.restart_kernel(now=True)
        assert _wait(lambda: not live_rank_pids(run_dir), 15), "ranks outlived the kernel"
        # The launcher's guard (launch/guard.py) sees the kernel gone and ends horovodrun:
        # SIGTERM, then SIGKILL after 5 s.
        assert _wait(lambda: not pid_alive(info["launcher"]), 20), "horovodrun outlived it"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)

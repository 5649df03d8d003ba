"""The rank modules under the plain launchers, as a student would type them (no mocks).

Each command is the one its engine gives (`Engine.plain_command`), which is also the first
line of the rank module's docstring and what notebook 02 prints. It must train and leave a
record that `workbench show` opens.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench.cli import main as cli_main
from workbench.config import ENGINES as CONFIG_ENGINES
from workbench.config import JobConfig
from workbench.engines import ENGINES, training_engines
from workbench.rank import protocol
from workbench.rank.context import config_from_flags, first_failure, job_record, run_main
from workbench.rank.protocol import Ended
from workbench.records import list_runs, of_kind

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent          # torchrun and horovodrun live beside python
STEPS = 3
TINY = ["--epochs", "1", "--max-steps", str(STEPS), "--width", "16", "--dataset", "digits",
        "--threads-per-rank", "1", "--batch-size", "16"]


def typed(command: list[str]) -> list[str]:
    """The command with its programs taken from this environment (python, torchrun, ...)."""
    return [sys.executable if word == "python" else
            str(BIN / word) if word in ("torchrun", "horovodrun") else word
            for word in command]


def run_plainly(command: list[str], cwd: Path, timeout: float = 240.0, rc: int = 0) -> str:
    """Run `command` in `cwd` as from a shell, without the workbench's launcher variables;
    check its exit code and return its output. A command that overruns is ended with all
    its processes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    text = out.decode(errors="replace")
    assert proc.returncode == rc, text[-3000:]
    return text


@pytest.mark.parametrize("engine", ["torch", "horovod", "naive", "serial"])
def test_plain_command_trains_and_leaves_a_record_that_show_opens(engine, tmp_path, capsys):
    ranks = 1 if engine == "serial" else 2
    command = ENGINES[engine].plain_command(ranks)
    run_plainly(typed(command) + TINY, tmp_path)

    [record] = list_runs(tmp_path / "runs")          # one folder for all ranks of the launch
    summary = record.summary
    assert summary["status"] == "succeeded", summary
    assert summary["engine"] == engine and summary["np"] == ranks
    assert summary["steps_completed"] == STEPS and summary["samples_per_s"] > 0
    assert record.config["engine"] == engine and record.config["max_steps"] == STEPS
    steps = of_kind(record.metrics(), "step")
    assert sorted({s["rank"] for s in steps}) == list(range(ranks))
    assert (record.run_dir / "model.pt").exists()
    assert sorted(p.name for p in (record.run_dir / "exit").iterdir()) == [
        f"rank{r}.json" for r in range(ranks)]

    capsys.readouterr()
    assert cli_main(["show", record.run_id, "--runs-dir", str(tmp_path / "runs"),
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "succeeded"


@pytest.mark.parametrize("engine, ranks", [("serial", 1), ("torch", 2)])
def test_a_rank_that_fails_by_hand_leaves_a_failed_summary_naming_it(engine, ranks, tmp_path):
    """The failing rank is named with its traceback. With two ranks it is rank 1, which
    fails on purpose; rank 0 then fails too (gloo's connection closes, or torchrun ends it
    with SIGTERM), and rank 0, which writes the summary, must name rank 1 from the exit
    records, not itself."""
    failing = ranks - 1
    command = (typed(ENGINES[engine].plain_command(ranks)) + TINY
               + ["--fail-at-step", "2", "--fail-rank", str(failing)])
    out = run_plainly(command, tmp_path, rc=1)
    [record] = list_runs(tmp_path / "runs")
    failure = record.summary["failure"]
    if engine == "torch":  # torchrun's own failure report, from the error file it reads
        assert "InjectedFault" in out[out.rindex("FAILED"):], out[-3000:]
    assert record.summary["status"] == "failed" and failure["rank"] == failing, failure
    assert "InjectedFault" in failure["error"] and "before_step" in failure["traceback"]
    exits = {p.name: json.loads(p.read_text()) for p in (record.run_dir / "exit").iterdir()}
    assert sorted(exits) == [f"rank{r}.json" for r in range(ranks)]
    assert not any(e["ok"] for e in exits.values()), exits


def test_a_plain_launchs_summary_names_the_first_error_and_survives_unreadable_records(
        tmp_path):
    """first_failure runs in rank 0's exit handler: it names the first rank that failed
    (not one its launcher ended), and an exit record it cannot read never costs the
    summary: it then names rank 0's own error."""
    exits = tmp_path / "exit"
    exits.mkdir()
    ctx = SimpleNamespace(run_dir=tmp_path, size=3, rank=0)
    (exits / "rank0.json").write_text(json.dumps(
        {"rank": 0, "ok": False, "time": 20.0, "ended_by": "SIGTERM", "error": "ended"}))
    (exits / "rank1.json").write_text(json.dumps(
        {"rank": 1, "ok": False, "time": 10.0, "error": "ValueError: bad",
         "traceback": "Traceback ... ValueError: bad"}))
    (exits / "rank2.json").write_text("{half a rec")
    named = first_failure(ctx, Ended())
    assert (named["rank"], named["error"]) == (1, "ValueError: bad")
    assert named["traceback"].endswith("ValueError: bad")
    (exits / "rank1.json").write_text("[]")            # JSON, but no record
    named = first_failure(ctx, RuntimeError("gloo: connection closed"))
    assert named["rank"] == 0 and named["error"].startswith("RuntimeError: gloo")


def _plain_run(tmp_path, monkeypatch, body) -> tuple[dict, dict]:
    """`body` run as a plain launch's rank module does, `run_main(main)` round a `main` that
    opens its context with `job_record`; the exit record and summary it left."""
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # pytest keeps its SIGTERM
    monkeypatch.setattr(protocol, "_current", None)
    for name in ("HOROVOD_RANK", "RANK", "HOROVOD_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    opened = []

    def main():
        opened.append(job_record(JobConfig(runs_dir=str(tmp_path), np=1)))
        body()

    try:
        run_main(main)
    except (SystemExit, RuntimeError):
        pass  # what ended `main` goes on out of run_main, to the interpreter
    [ctx] = opened
    assert protocol.current() is None  # closed
    return (json.loads((ctx.run_dir / "exit" / "rank0.json").read_text()),
            json.loads((ctx.run_dir / "summary.json").read_text()))


@pytest.mark.parametrize("code, status", [(3, "failed"), ("bad", "failed"), (0, "succeeded"),
                                          (None, "succeeded")])
def test_a_plain_ranks_sys_exit_after_job_record_counts_by_its_code(code, status, tmp_path,
                                                                     monkeypatch):
    """A plain launch's rank writes its exit record and summary as `main` ends (run_main),
    and no hook of the whole process sees a SystemExit: sys.exit(3) must still fail the
    rank, and sys.exit(0) succeed, as under the rank wrapper."""
    hooks = sys.exit, sys.excepthook  # as found: torch's init_process_group, run in this
    # process by another test, sets an excepthook of its own; this run must replace neither
    record, summary = _plain_run(tmp_path, monkeypatch, lambda: sys.exit(code))
    assert record["ok"] == (status == "succeeded"), record
    assert summary["status"] == status
    if status == "failed":
        assert record["error"] == f"SystemExit: {code}" and "Traceback" not in record["traceback"]
    assert (sys.exit, sys.excepthook) == hooks  # never replaced


def test_a_plain_ranks_sys_exit_in_a_thread_or_before_an_error_is_not_what_ended_it(
        tmp_path, monkeypatch):
    """sys.exit(3) in a thread ends only that thread: the rank still succeeds. And the error
    that ended the process is the one named, not a sys.exit that came (and was caught)
    before it."""
    def exit_in_a_thread():
        thread = threading.Thread(target=lambda: pytest.raises(SystemExit, sys.exit, 3))
        thread.start()
        thread.join()

    record, summary = _plain_run(tmp_path, monkeypatch, exit_in_a_thread)
    assert record["ok"] and summary["status"] == "succeeded", record

    def exit_caught_then_error():
        with pytest.raises(SystemExit):
            sys.exit(2)                              # caught, and the rank carries on ...
        raise RuntimeError("the real failure")       # ... until this ends it

    record, summary = _plain_run(tmp_path / "again", monkeypatch, exit_caught_then_error)
    assert record["error"] == "RuntimeError: the real failure", record
    assert summary["status"] == "failed"


@pytest.mark.parametrize("engine", training_engines())
def test_each_rank_module_docstring_opens_with_its_plain_command(engine):
    module = importlib.util.find_spec(ENGINES[engine].rank_module)
    first = Path(module.origin).read_text().splitlines()[0].strip('"')
    ranks = 1 if engine == "serial" else 2
    assert first == " ".join(ENGINES[engine].plain_command(ranks))


def test_plain_flags_are_workbench_runs_flags_and_the_launcher_decides_np():
    cfg = config_from_flags("torch", 2,
                            ["--epochs", "2", "--lr", "0.05", "--runs-dir", "elsewhere"])
    assert (cfg.engine, cfg.np, cfg.epochs, cfg.lr, cfg.runs_dir) == (
        "torch", 2, 2, 0.05, "elsewhere")
    for bad in (["--np", "3"], ["--engine", "horovod"], ["--model", "resnet"],
                ["--epochs", "many"]):
        with pytest.raises(SystemExit) as stop:
            config_from_flags("torch", 2, bad)
        assert stop.value.code == 2, bad


# ----------------------------------------------------------------- the engines' own knowledge
def test_every_training_engine_is_a_configuration_choice_and_has_a_rank_module():
    """config.py reads its engine names off the one table (engines.py): each training
    engine is a valid choice with a module its ranks run; the labs' engine is neither."""
    assert CONFIG_ENGINES == tuple(training_engines()) and "fork" not in CONFIG_ENGINES
    for name in CONFIG_ENGINES:
        assert JobConfig(engine=name, np=1).validate().engine == name
        assert importlib.util.find_spec(ENGINES[name].rank_module) is not None, name
    assert ENGINES["fork"].rank_module is None  # the labs' engine trains nothing


def test_horovod_settings_reach_only_horovod_ranks(tmp_path):
    cfg = JobConfig(engine="horovod", timeline=True, cycle_time_ms=2.5)
    env = ENGINES["horovod"].environment(tmp_path, cfg.timeline, cfg.cycle_time_ms)
    assert env == {"HOROVOD_TIMELINE": str(tmp_path / "timeline.json"),
                   "HOROVOD_CACHE_CAPACITY": "0", "HOROVOD_CYCLE_TIME": "2.5"}
    torch_cfg = JobConfig(engine="torch", cycle_time_ms=2.5)
    assert ENGINES["torch"].environment(tmp_path, torch_cfg.timeline,
                                        torch_cfg.cycle_time_ms) == {}

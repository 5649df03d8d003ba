"""Which rank a failed job blames, stops that always end the job, and the multi-host torch
rendezvous (records/blame.py, launch/job.py, launch/torch_hosts.py).

The choice of culprit is a pure function, tested on made-up failures. One real torch job
(two ranks, `--hosts localhost:2`, queued behind another job's cores) then checks all that
such a run must show: it queued for this host's cores, its torchrun hosted the rendezvous
on a port the system gave, the raising rank is blamed, and the rank its launcher ended
recorded that it was ended.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from workbench.config import JobConfig
from workbench.launch import cores, start_module, torch_hosts
from workbench.launch.launchers import Local, Ssh, job_processes
from workbench.launch.slurm import SlurmBatch
from workbench.launch.starting import launcher_for
from workbench.launch.watch import Watcher, outcome
from workbench.records import read_json
from workbench.records.blame import (
    Failure,
    culprit,
    launcher_failure,
    ranks_failure,
    reported_failure,
)

SMALL = dict(engine="serial", np=1, model="logreg", dataset="digits", epochs=1, max_steps=5,
             threads_per_rank=1)


# ------------------------------------------------------------ the culprit, on one clock
def test_an_error_reported_before_a_rank_was_last_seen_alive_wins():
    """torchrun SIGTERMs the other ranks 0.1 s after one fails: the error came first."""
    raised = Failure(1, "error", 10.00, "RuntimeError: boom")
    ended = Failure(0, "vanished", 10.05, "rank 0 ended without reporting")
    assert culprit([ended, raised]) == raised


def test_a_rank_that_vanished_before_an_error_is_blamed_for_it():
    """kill -9 of rank 1: rank 0's collective fails a moment later, on a broken connection."""
    killed = Failure(1, "vanished", 10.00, "rank 1 ended without reporting")
    broken = Failure(0, "error", 10.02, "RuntimeError: Connection closed by peer")
    assert culprit([broken, killed]) == killed
    assert culprit([Failure(0, "error", 10.0, "x"), Failure(1, "vanished", 10.0, "y")]).rank == 1


def test_a_rank_ended_by_its_launcher_is_blamed_only_when_nothing_else_failed():
    ended = Failure(0, "ended", 1.0, "rank 0 was ended by SIGTERM")
    later = Failure(1, "error", 5.0, "ValueError: bad")
    assert culprit([ended, later]) == later
    assert culprit([ended]) == ended
    assert culprit([]) is None


def test_a_remote_ranks_error_is_placed_when_the_watcher_saw_it_not_by_its_own_clock():
    """Another host's clock 5 s behind must not make its late error look first."""
    remote = reported_failure(1, {"ok": False, "time": 5.0, "error": "late"}, local=False,
                              first_seen=10.3)
    here = reported_failure(0, {"ok": False, "time": 10.0, "error": "first"}, local=True,
                            first_seen=10.1)
    assert (remote.at, here.at) == (10.3, 10.0)
    assert culprit([remote, here]) == here
    ended = reported_failure(0, {"ok": False, "time": 1.0, "ended_by": "SIGTERM",
                                 "error": "ended"}, local=True, first_seen=2.0)
    assert ended.kind == "ended"
    assert reported_failure(0, {"ok": True, "time": 1.0}, local=True, first_seen=2.0) is None


def test_the_failure_record_names_the_culprit_with_its_traceback_and_the_others_errors():
    exits = {0: {"ok": False, "time": 10.05, "error": "ended", "ended_by": "SIGTERM"},
             1: {"ok": False, "time": 10.0, "error": "RuntimeError: boom",
                 "traceback": "Traceback ...\nRuntimeError: boom"},
             2: {"ok": True, "time": 11.0}}
    failures = [reported_failure(r, rec, local=True, first_seen=12.0) for r, rec in exits.items()]
    assert ranks_failure([f for f in failures if f], exits) == {
        "rank": 1, "error": "RuntimeError: boom",
        "traceback": "Traceback ...\nRuntimeError: boom", "others": {0: "ended"}}


def test_a_launcher_that_ended_first_blames_only_a_rank_that_had_started():
    exits = {0: {"ok": True, "time": 1.0}}
    failure = launcher_failure(3, exits, {0, 2}, "the torch launcher exited with code 1",
                               "ModuleNotFoundError: No module named 'x'")
    assert failure == {"rank": 2, "error": "the torch launcher exited with code 1 before "
                       "rank(s) [1, 2] reported: ModuleNotFoundError: No module named 'x'"}
    assert launcher_failure(2, {}, set(), "it ended", None) == {
        "rank": None, "error": "it ended before rank(s) [0, 1] reported"}


# ------------------------------------------------------------ what one look concludes
def ending(rc: int) -> str:
    return f"the torch launcher exited with code {rc}"


def test_the_outcome_of_one_look_is_a_function_of_what_was_seen():
    ok = {"ok": True, "time": 1.0}
    # still running: no failure and the launcher has not exited, whatever the ranks said
    assert outcome(2, {0: ok}, [], {0, 1}, None, ending) is None
    assert outcome(2, {0: ok, 1: ok}, [], {0, 1}, None, ending) is None
    # every rank reported success and the launcher exited 0
    assert outcome(2, {0: ok, 1: ok}, [], {0, 1}, 0, ending) == ("succeeded", None)
    # a failure ends the job while the launcher still runs, blaming the culprit
    killed = Failure(1, "vanished", 10.0, "rank 1 ended without reporting")
    assert outcome(2, {0: ok}, [killed], {0, 1}, None, ending) == (
        "failed", {"rank": 1, "error": "rank 1 ended without reporting", "others": {}})
    # all succeeded but the launcher failed: a failure, with the launcher's words and cause
    status, failure = outcome(2, {0: ok, 1: ok}, [], {0, 1}, 3, ending)
    assert status == "failed" and failure["error"] == "the torch launcher exited with code 3"
    # the launcher exited (even with 0) before rank 1 reported: rank 1 is blamed
    status, failure = outcome(2, {0: ok}, [], {0, 1}, 0, ending,
                              "[1]<stderr>:ImportError: no module named x\n")
    assert status == "failed" and failure["rank"] == 1
    assert failure["error"].endswith("before rank(s) [1] reported: ImportError: no module "
                                     "named x")


class _StoppedBeat:
    """A remote rank's heartbeat that last changed `age` seconds ago."""

    def __init__(self, age: float) -> None:
        self._age, self.changed_at = age, time.monotonic() - age

    def age(self) -> float:
        return self._age


def test_a_remote_rank_that_stopped_beating_stays_a_suspect_until_it_is_called_gone():
    # kill -9 on host b, and rank 0 reports HorovodInternalError a moment later: while
    # rank 1's heartbeat is not yet old enough to call it gone (a loaded host may take
    # seconds to see horovodrun exit), the watcher must keep looking, not blame rank 0.
    ssh = Ssh.__new__(Ssh)
    ssh.alive_at = {}
    ranks = {0: (os.getpid(), socket.gethostname()), 1: (12, "host-b")}  # rank 0 lives here
    error_seen = time.monotonic()
    for age, suspect, gone in [(0.5, True, False), (5.0, True, False), (11.0, False, True)]:
        ssh.beats = {1: _StoppedBeat(age)}
        assert ssh.undecided({}, ranks, error_seen) is suspect, age
        assert [f.rank for f in ssh.vanished({}, ranks, ended=False)] == ([1] if gone else []), age
    ssh.beats = {1: _StoppedBeat(5.0)}  # once the launcher has exited, 3 s is enough
    assert [f.rank for f in ssh.vanished({}, ranks, ended=True)] == [1]
    ssh.beats = {1: _StoppedBeat(0.2)}  # it beat after the error: alive, no suspect
    assert not ssh.undecided({}, ranks, ssh.beats[1].changed_at - 1.0)


def kind(**fields) -> type:
    return type(launcher_for(JobConfig(**fields)))


def cores_needed(**fields) -> int:
    return launcher_for(JobConfig(**fields)).cores_bound()


def test_each_way_of_starting_ranks_is_one_launcher_class():
    assert kind(engine="torch", np=2) is Local
    assert kind(engine="torch", np=2, hosts="localhost:2") is Local
    assert kind(engine="torch", np=2, hosts="10.9.9.9:1,localhost:1") is Ssh
    assert kind(engine="torch", np=2, hosts="a..b:1,localhost:1") is Ssh
    assert kind(engine="horovod", np=2, launcher="slurm") is SlurmBatch
    assert cores_needed(engine="torch", np=2, threads_per_rank=2) == 4
    assert cores_needed(engine="torch", np=2, hosts="localhost:2") == 2
    for no_cores_here in (dict(cpu_bind="none"), dict(hosts="10.9.9.9:1,localhost:1"),
                          dict(launcher="slurm")):
        assert cores_needed(engine="torch", np=2, **no_cores_here) == 0
    assert Local.shares_this_host and not SlurmBatch.shares_this_host


# ------------------------------------------------------------ one real torch job
RAISE_IN_RANK_1 = """
    import os, time
    from workbench.rank.context import this_rank
    ctx = this_rank()
    ctx.metric("event", message="ready", cores=sorted(os.sched_getaffinity(0)))
    if ctx.rank == 1:
        while not (ctx.run_dir / "metrics" / "rank0.jsonl").exists():
            time.sleep(0.01)
        time.sleep(0.3)                  # rank 0 is busy computing by now
        raise RuntimeError("rank 1 fails on purpose")
    end, n = time.time() + 60, 0
    while time.time() < end:             # rank 0 computes, in Python
        n += 1
"""


@pytest.fixture(scope="module")
def failed_torch_job(tmp_path_factory):
    """A torch job on `--hosts localhost:2`, queued behind a job holding both cores, whose
    rank 1 raises while rank 0 computes."""
    tmp = tmp_path_factory.mktemp("blame")
    (tmp / "mods").mkdir()
    (tmp / "mods" / "wb_raise_in_rank_1.py").write_text(textwrap.dedent(RAISE_IN_RANK_1))
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", cores.ENV_SHARED_DIR)}
    affinity = os.sched_getaffinity(0)
    two = sorted(affinity)[:2]
    os.environ["PYTHONPATH"] = f"{tmp / 'mods'}{os.pathsep}{saved['PYTHONPATH'] or ''}"
    os.environ[cores.ENV_SHARED_DIR] = str(tmp / "shared")
    os.sched_setaffinity(0, two)
    slow_watcher = pytest.MonkeyPatch()
    # The watcher judges only once the launcher has exited: torchrun (which looks every
    # 0.1 s) has then ended rank 0 before the watcher saw rank 1's error, the race that
    # blamed rank 0 in 2 of 3 runs, made certain here.
    look = Watcher.look
    slow_watcher.setattr(Watcher, "look",
                         lambda w: None if w.launcher.exit_code() is None else look(w))
    try:
        holder = cores.Ticket("holder", 2, cores.settings())
        assert holder.poll()
        job = start_module("torch", 2, "wb_raise_in_rank_1", runs_dir=str(tmp / "runs"),
                           hosts="localhost:2", threads_per_rank=1, stall_timeout=90)
        queued = (job.status, job.queue_position, job.cores, job.launcher_pid)
        time.sleep(0.6)
        still_queued = job.status
        holder.release()
        status = job.wait(150)
        yield {"job": job, "queued": queued, "still_queued": still_queued, "status": status,
               "two": two, "snapshot": cores.snapshot()}
    finally:
        slow_watcher.undo()
        os.sched_setaffinity(0, affinity)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_hosts_naming_only_this_machine_queue_for_its_cores(failed_torch_job):
    run = failed_torch_job
    assert run["queued"] == ("queued", 1, None, None)
    assert run["still_queued"] == "queued"
    job = run["job"]
    assert job.cores == run["two"] and job.summary["cores"] == run["two"]
    ready = [m for m in job.metrics() if m.get("message") == "ready"]
    assert sorted(m["rank"] for m in ready) == [0, 1]
    assert all(set(m["cores"]) <= set(run["two"]) for m in ready)  # ranks on its cores
    assert run["snapshot"] == {"held": [], "waiting": []}          # given back


def test_the_first_hosts_torchrun_hosts_the_rendezvous_on_a_port_the_system_gave(
        failed_torch_job):
    log = failed_torch_job["job"].record().log("launcher", last=400)
    said = re.search(r"torch_hosts: rendezvous at localhost:(\d+), hosted by the torchrun on "
                     r"localhost \(is_host=true\)", log)
    assert said, log[-2000:]
    assert 1024 <= int(said[1]) <= 65535
    assert "found in sys.modules" not in log  # the launcher module is imported once


def test_the_raising_rank_is_blamed_and_the_ended_rank_says_so(failed_torch_job):
    job = failed_torch_job["job"]
    assert failed_torch_job["status"] == "failed", job.summary
    failure = job.summary["failure"]
    assert failure["rank"] == 1, failure
    assert "rank 1 fails on purpose" in failure["error"]
    assert "Traceback" in failure["traceback"]
    ended = read_json(job.run_dir / "exit" / "rank0.json")
    assert ended["ok"] is False and ended["ended_by"] == "SIGTERM", ended
    assert "ended by SIGTERM" in failure["others"][0]
    assert not job_processes(job.run_id)


# ------------------------------------------------------------ a squatted rendezvous port
def test_a_taken_rendezvous_port_fails_the_job_at_once_rather_than_talk_to_its_squatter(
        tmp_path):
    squatter = socket.socket()
    squatter.bind(("", 0))
    squatter.listen()
    port = squatter.getsockname()[1]
    (tmp_path / "hello.py").write_text("print('trained')\n")
    code = (f"import sys; from workbench.launch import torch_hosts as t; "
            f"t.free_port = lambda host: {port}; "
            f"sys.exit(t.main(['--hosts', 'localhost:1', '--np', '1', '--rdzv-id', 'squat', "
            f"'--', {str(tmp_path / 'hello.py')!r}]))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=90)
    finally:
        squatter.close()
    assert done.returncode != 0 and "trained" not in done.stdout, done.stdout
    assert "RendezvousConnectionError" in done.stderr, done.stderr[-3000:]
    assert "torch_hosts: a host's torchrun exited with code" in done.stderr


def test_free_port_is_a_port_this_host_can_bind():
    port = torch_hosts.free_port("localhost")
    with socket.socket() as s:
        s.bind(("", port))
    assert "--rdzv-conf=is_host=true" in torch_hosts.torchrun_command(
        2, 1, f"a:{port}", "r", ["-m", "m"], is_host=True)
    assert "--rdzv-conf=is_host=false" in torch_hosts.torchrun_command(
        2, 1, f"a:{port}", "r", ["-m", "m"], is_host=False)


# ------------------------------------------------------------ Ctrl-C twice on a queued job
CTRL_C_TWICE = """
import json, os, signal, sys, threading, time
import psutil, workbench
from workbench.launch import cores
from workbench.launch import job as job_module

cores.affinity = lambda: [0, 1]
holder = cores.Ticket("holder", 2, cores.settings())
assert holder.poll()
job = workbench.start(workbench.JobConfig(runs_dir=sys.argv[1], **json.loads(sys.argv[2])))
queued = job.status
if sys.argv[3] == "in the stop":  # the stop's summary takes 0.3 s: the second Ctrl-C lands in it
    write = job_module.write_json_atomic
    job_module.write_json_atomic = lambda *a, **kw: (time.sleep(0.3), write(*a, **kw))
else:  # the process is held up (a loaded machine) before the stop begins: the second lands there
    stop_waiting = job_module.stop_waiting
    job_module.stop_waiting = lambda *a: (time.sleep(0.3), stop_waiting(*a))[1]

def ctrl_c_twice():
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.02)                                 # the stop is under way by now
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=ctrl_c_twice).start()
try:
    job.wait(30)
    raised = False
except KeyboardInterrupt:
    raised = True
after = {"done": job.done, "status": job.status}
holder.release()                                     # its cores come free ...
time.sleep(3 * job_module.QUEUE_POLL_S)
children = [p for p in psutil.Process().children(recursive=True)
            if p.status() != psutil.STATUS_ZOMBIE]
print(json.dumps({"queued": queued, "raised": raised, **after, "later": job.status,
                  "launcher_pid": job.launcher_pid, "snapshot": cores.snapshot(),
                  "children": len(children), "run_dir": str(job.run_dir)}))
"""


@pytest.mark.parametrize("second", ["in the stop", "before the stop"])
def test_two_ctrl_c_20_ms_apart_on_a_queued_job_stop_it_for_good(tmp_path, second):
    env = {**os.environ, cores.ENV_SHARED_DIR: str(tmp_path / "shared")}
    done = subprocess.run([sys.executable, "-c", CTRL_C_TWICE, str(tmp_path / "runs"),
                           json.dumps(SMALL), second], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["queued"] == "queued" and out["raised"] is True, (out, done.stderr[-3000:])
    assert out["done"] is True and out["status"] == "stopped"
    assert out["later"] == "stopped" and out["launcher_pid"] is None  # it never launched
    assert out["snapshot"] == {"held": [], "waiting": []} and out["children"] == 0
    summary = json.loads((Path(out["run_dir"]) / "summary.json").read_text())
    assert summary["status"] == "stopped"

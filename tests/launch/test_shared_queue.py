"""The host's core queue among users who do not trust each other (launch/cores.py, shared_file.py).

The other users are real: `nobody`, and a second student, a uid with no account, each run
through `setpriv --reuid/--regid --clear-groups` (so these tests need root, which the
test machines have). The shared folders are made under /tmp, where every user can reach
them. Jobs here queue and never start a rank, so every test takes about a second.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
from _other_user import closed_to_others

import workbench
from workbench.cli import main as cli_main
from workbench.config import ConfigError
from workbench.launch import cores, shared_file
from workbench.launch import job as job_module

NOBODY = pwd.getpwnam("nobody")
STUDENT = 54321  # a second unprivileged user, with no account
EMPTY = {"held": [], "waiting": []}
SMALL = dict(engine="serial", np=1, model="logreg", dataset="digits", epochs=1, max_steps=5,
             threads_per_rank=1)

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                       reason="acting as other users needs root and setpriv"),
    # the other users run this checkout's Python and package
    pytest.mark.skipif(closed_to_others(Path(sys.executable)) is not None,
                       reason=closed_to_others(Path(sys.executable)) or ""),
]


@pytest.fixture
def public():
    """A folder like /tmp, that every user can reach and write (pytest's tmp_path is root's
    only)."""
    folder = Path(tempfile.mkdtemp(dir="/tmp", prefix="wb-queue-"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def shared(public, monkeypatch):
    """The shared folder as the administrator makes it: root's, sticky, world-writable."""
    folder = public / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    monkeypatch.setenv(cores.ENV_SHARED_DIR, str(folder))
    for name in [n for n in os.environ if n.startswith("JUPYTERHUB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv(cores.ENV_JOBS_PER_USER, "0")
    return folder


def as_user(uid: int, *argv: str, gid: int | None = None, **kwargs) -> subprocess.Popen:
    """Start `argv` as user `uid` (its own group, no other groups), with our PYTHONPATH."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           cores.ENV_SHARED_DIR: os.environ.get(cores.ENV_SHARED_DIR, ""), "HOME": "/tmp"}
    return subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={gid or uid}",
                             "--clear-groups", *argv], env=env, text=True, **kwargs)


def run_as(uid: int, *argv: str, gid: int | None = None) -> subprocess.CompletedProcess:
    proc = as_user(uid, *argv, gid=gid, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def as_nobody(shell: str) -> None:
    done = run_as(NOBODY.pw_uid, "sh", "-c", shell, gid=NOBODY.pw_gid)
    assert done.returncode == 0, done.stderr


def holder_of_both_cores(monkeypatch) -> cores.Ticket:
    """Another job that holds both cores this test process sees."""
    monkeypatch.setattr(cores, "affinity", lambda: [0, 1])
    holder = cores.Ticket(f"holder-{uuid.uuid4().hex[:6]}", 2, cores.settings())
    assert holder.poll()
    return holder


def queued_job(tmp_path: Path) -> workbench.Job:
    job = workbench.start(workbench.JobConfig(runs_dir=str(tmp_path / "runs"), **SMALL))
    assert job.status == "queued"
    return job


def entries(run_id: str) -> list[dict]:
    state = cores.snapshot()
    return [e for key in ("held", "waiting") for e in state[key] if e["run_id"] == run_id]


# ------------------------------------------------------------ 1: links are never followed
def test_a_planted_link_is_never_followed_and_a_students_folder_is_refused(
        tmp_path, public, shared, capfd):
    victim = tmp_path / "secret"
    victim.write_text("mine")
    victim.chmod(0o600)
    # The attacker made the folder first, with a link where the queue's file goes.
    evil = public / "evil"
    as_nobody(f"mkdir -m 1777 {evil} && ln -s {victim} {evil}/cores.json")
    with pytest.raises(ConfigError, match=f"{evil} is owned by nobody, who could replace"):
        cores.snapshot(evil)
    # The administrator's folder, with the attacker's link in it.
    as_nobody(f"ln -s {victim} {shared}/cores.json")
    capfd.readouterr()
    assert cores.snapshot(shared) == EMPTY
    [line] = capfd.readouterr().err.splitlines()
    assert "cores.json was unusable (a symbolic link; owned by nobody): moved aside" in line
    assert victim.read_text() == "mine" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    made = (shared / "cores.json").lstat()
    assert stat.S_ISREG(made.st_mode) and stat.S_IMODE(made.st_mode) == 0o666
    [aside] = shared.glob("cores.json.bad-*")  # the evidence is kept
    assert aside.is_symlink() and os.readlink(aside) == str(victim)


def test_a_folder_that_others_may_write_without_the_sticky_bit_is_refused(public, monkeypatch):
    open_folder = public / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by other users .mode 777. without the "
                                          "sticky bit.*install -d -m 1777"):
        cores.snapshot(open_folder)
    monkeypatch.setenv(cores.ENV_SHARED_DIR, str(open_folder))
    with pytest.raises(ConfigError, match="without the sticky bit"):
        cores.settings()


@pytest.mark.parametrize(("mode", "uid", "problem"), [
    (stat.S_IFDIR | 0o1777, 0, None),
    (stat.S_IFDIR | 0o755, 1000, None),           # the user's own, private folder
    (stat.S_IFDIR | 0o1777, 1001, "is owned by uid 1001"),
    (stat.S_IFDIR | 0o775, 0, "mode 775"),        # group-writable, not sticky
    (stat.S_IFREG | 0o644, 1000, "is not a folder"),
])
def test_folder_problem_names_what_makes_a_folder_unsafe(mode, uid, problem):
    st = os.stat_result((mode, 1, 1, 2, uid, 0, 4096, 0, 0, 0))
    found = shared_file.folder_problem(st, 1000)
    assert found is None if problem is None else problem in found


# ------------------------------------------------------------ 2: the file is never trusted
OWNER = f"{os.getpid()}:{1.5}"
PROOF = "proof-0123456789abcdef"
GOOD_HELD = {"run_id": "a", "user": "ann", "owner": OWNER, "proof": PROOF, "cores": [0],
             "since": 1.0}
GOOD_WAITING = {"run_id": "b", "user": "bob", "owner": OWNER, "proof": PROOF, "n_cores": 1,
                "since": 2.0}


@pytest.mark.parametrize(("data", "kept", "problem"), [
    (b"", EMPTY, None),
    (json.dumps({"held": [GOOD_HELD], "waiting": [GOOD_WAITING]}).encode(),
     {"held": [GOOD_HELD], "waiting": [GOOD_WAITING]}, None),
    (b"[]", EMPTY, "holds a JSON list"),
    (b"\xff\xfe garbage", EMPTY, "is not valid JSON"),
    (b'{"held": 3}', EMPTY, "'held' that is not a list"),
    (json.dumps({"held": [{**GOOD_HELD, "owner": None}, GOOD_HELD]}).encode(),
     {"held": [GOOD_HELD], "waiting": []}, "held[0] without a valid 'owner'"),
    (json.dumps({"held": [GOOD_HELD, {**GOOD_HELD, "run_id": "c"}]}).encode(),
     {"held": [GOOD_HELD], "waiting": []}, "held[1] with cores that are not distinct"),
    (json.dumps({"waiting": [{**GOOD_WAITING, "n_cores": True}]}).encode(), EMPTY,
     "without a valid 'n_cores'"),
    (json.dumps({"waiting": [GOOD_WAITING, GOOD_WAITING]}).encode(),
     {"held": [], "waiting": [GOOD_WAITING]}, "repeats run 'b'"),
    (json.dumps({"held": [{**GOOD_HELD, "extra": "x" * 10}]}).encode(),
     {"held": [GOOD_HELD], "waiting": []}, None),  # unknown fields are dropped, not kept
], ids=["empty", "good", "list", "garbage", "held-not-list", "no-owner", "shared-cores",
        "bool-n-cores", "repeated-run", "unknown-field"])  # (ids without this process's pid,
# which differs between pytest-xdist's workers)
def test_parse_state_keeps_only_well_formed_entries(data, kept, problem):
    state, problems = cores.parse_state(data)
    assert state == kept
    assert problems == [] if problem is None else problem in problems[0]


FORGER = """
import fcntl, json, os, sys
from workbench.launch import cores, shared_file
folder = sys.argv[1]
fd = os.open(folder + "/cores.json", os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
state = json.loads(os.read(fd, 1 << 20))
dir_fd = os.open(folder, os.O_RDONLY)
for core, pid in enumerate(int(p) for p in sys.argv[2:]):
    owner = cores.owner_id(pid)  # a live process, not mine, with a proof of my own making
    state["held"].append({"run_id": f"forged-{core}", "user": "root", "owner": owner,
                          "proof": shared_file.make_proof(dir_fd, owner), "cores": [core],
                          "since": 0})
os.ftruncate(fd, 0)
os.pwrite(fd, json.dumps(state).encode(), 0)
"""


def test_an_entry_in_the_name_of_another_users_process_is_not_believed(shared, monkeypatch,
                                                                         capfd):
    """cores.json is every user's to write: nobody writes entries holding both cores in the
    name of pid 1 and of this (root's) process. Neither is believed, and a job of ours gets
    both cores; nobody's own entry, made by the queue as nobody, still is."""
    keeper = as_user(NOBODY.pw_uid, sys.executable, "-c", (
        "import time\nfrom workbench.launch import cores\n"
        "ticket = cores.Ticket('nobodys', 0, cores.settings())\nassert ticket.poll()\n"
        "print('held', flush=True)\ntime.sleep(120)"), gid=NOBODY.pw_gid,
        stdout=subprocess.PIPE)
    try:
        assert keeper.stdout.readline().strip() == "held"
        forged = run_as(NOBODY.pw_uid, sys.executable, "-c", FORGER, str(shared), "1",
                        str(os.getpid()), gid=NOBODY.pw_gid)
        assert forged.returncode == 0, forged.stderr
        written = json.loads((shared / "cores.json").read_text())["held"]
        assert [e["run_id"] for e in written] == ["nobodys", "forged-0", "forged-1"]
        capfd.readouterr()
        assert [e["run_id"] for e in cores.snapshot()["held"]] == ["nobodys"]
        said = capfd.readouterr().err.splitlines()
        for run, pid in (("forged-0", 1), ("forged-1", os.getpid())):
            assert any(f"entry for run {run!r} in the name of pid {pid} (user root) that "
                       "this user did not make" in line for line in said), said
        mine = holder_of_both_cores(monkeypatch)   # both cores: the forgeries held none
        assert mine.cores == [0, 1]
        mine.release()
    finally:
        keeper.kill()
        keeper.wait()


@pytest.mark.parametrize("vandal", [
    "printf '[]' > cores.json",
    "printf '{\"held\": [{\"run_id\": \"x\", \"user\": \"bob\", \"cores\": [0], "
    "\"since\": 0}], \"waiting\": []}' > cores.json",
    "head -c 300 /dev/urandom > cores.json",
    "mkdir cores.json",
])
def test_a_vandalised_queue_file_is_one_line_and_rebuilt(shared, capsys, vandal):
    as_nobody(f"cd {shared} && {vandal} && chmod -f 666 cores.json")
    assert cli_main(["classroom", "cores", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == EMPTY
    [line] = err.splitlines()
    assert line.startswith(f"workbench: {shared}/cores.json ")
    assert "rebuilt" in line or "moved aside" in line
    assert cores.parse_state((shared / "cores.json").read_bytes()) == (EMPTY, [])
    ticket = cores.Ticket("after", 1, cores.settings())  # and the queue works again
    assert ticket.poll()
    ticket.release()


def test_a_queued_job_survives_its_queue_file_being_vandalised(tmp_path, shared, monkeypatch,
                                                                capfd):
    holder = holder_of_both_cores(monkeypatch)
    job = queued_job(tmp_path)
    vandal = run_as(NOBODY.pw_uid, sys.executable, "-c", (  # under the lock: no write of
        "import fcntl, os\n"                                 # ours can overwrite it
        f"fd = os.open({str(shared / 'cores.json')!r}, os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nos.ftruncate(fd, 0)\nos.write(fd, b'[]')"),
        gid=NOBODY.pw_gid)
    assert vandal.returncode == 0, vandal.stderr  # every entry is lost, the holder's too
    end = time.monotonic() + 20
    while job.status == "queued" and time.monotonic() < end:
        time.sleep(0.05)
    assert job.status == "running", job.summary     # its queue thread lived on: it launched
    job.stop()
    assert "cores.json holds a JSON list, not the queue's object" in capfd.readouterr().err
    holder.release()
    assert cores.snapshot() == EMPTY


def test_a_student_who_cannot_fix_the_file_gets_one_line_naming_its_owner(shared):
    as_nobody(f"mkdir {shared}/cores.json")
    done = run_as(STUDENT, sys.executable, "-m", "workbench.cli", "classroom", "cores")
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith(f"workbench: error: {shared}/cores.json cannot be used (a folder; "
                           "owned by nobody) nor moved aside"), line


def test_a_lock_held_for_ever_fails_the_queued_job_naming_its_holder(
        tmp_path, shared, monkeypatch, capfd):
    monkeypatch.setattr(shared_file, "LOCK_TIMEOUT_S", 1.0)
    monkeypatch.setattr(shared_file, "SAY_WAIT_S", 0.5)
    holder = holder_of_both_cores(monkeypatch)
    job = queued_job(tmp_path)
    locker = as_user(NOBODY.pw_uid, sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(shared / 'cores.json')!r}, os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(120)"),
        gid=NOBODY.pw_gid, stdout=subprocess.PIPE)
    try:
        assert locker.stdout.readline().strip() == "locked"
        holder_name = f"pid {locker.pid} (user nobody, python"
        with pytest.raises(ConfigError, match=r"cores.json has been locked for 1 s by " +
                           holder_name.replace("(", r"\(")):  # a new job: one line, no hang
            workbench.start(workbench.JobConfig(runs_dir=str(tmp_path / "later"), **SMALL))
        assert not any((tmp_path / "later").iterdir())    # and no half-made run on record
        assert f"waiting for {shared}/cores.json, locked by {holder_name}" in (
            capfd.readouterr().err)                        # said while it waited
        assert job.wait(15) == "failed"                   # the queued one: failed, not stuck
        error = job.summary["failure"]["error"]
        assert error.startswith("lost its place in the queue for cores: ConfigError: ")
        assert holder_name in error
    finally:
        locker.kill()
        locker.wait()
    end = time.monotonic() + 10  # its entry is removed once the lock is free again
    while entries(job.run_id) and time.monotonic() < end:
        time.sleep(0.2)
    assert entries(job.run_id) == []
    holder.release()
    assert cores.snapshot() == EMPTY


# ------------------------------------------------------------ 3: a stop always leaves the queue
def test_a_queued_job_stopped_during_a_slow_summary_write_leaves_the_queue(
        tmp_path, shared, monkeypatch):
    holder = holder_of_both_cores(monkeypatch)
    job = queued_job(tmp_path)
    monkeypatch.setattr(job_module, "QUEUE_POLL_S", 0.02)  # it polls often while we stop
    write = job_module.write_json_atomic  # where the stop writes the summary
    monkeypatch.setattr(job_module, "write_json_atomic",  # slow, as on NFS
                        lambda *a, **kw: (time.sleep(0.6), write(*a, **kw)))
    job.stop()
    assert job.status == "stopped"
    time.sleep(0.2)
    assert not [t for t in threading.enumerate() if t.name == f"queue-{job.run_id}"]
    assert entries(job.run_id) == []
    holder.release()
    assert cores.snapshot() == EMPTY


# ------------------------------------------------------------ 11: fs.protected_regular
def test_the_queue_works_under_protected_regular_when_another_user_made_the_file(shared):
    made = run_as(NOBODY.pw_uid, sys.executable, "-m", "workbench.cli", "classroom", "cores",
                  gid=NOBODY.pw_gid)
    assert made.returncode == 0, made.stderr
    assert (shared / "cores.json").stat().st_uid == NOBODY.pw_uid
    setting = Path("/proc/sys/fs/protected_regular")
    before = setting.read_text()
    try:
        setting.write_text("1")  # as on systemd distributions
        ticket = cores.Ticket("under-protected-regular", 1, cores.settings())
        assert ticket.poll() and cores.snapshot()["held"][0]["run_id"] == ticket.run_id
        ticket.release()
        assert cores.snapshot() == EMPTY
    finally:
        setting.write_text(before)
    assert setting.read_text() == before

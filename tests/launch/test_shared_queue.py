"""The host's core queue between users who do not trust each other (launch/cores.py).

The second user is real: `wbother` (tests/_other_user.py), a kernel of its own asking for
cores through the same shared folder, run with `setpriv --reuid/--regid --clear-groups`, and
cheating where it can: a JUPYTERHUB_USER of someone else, a ticket dated back, a core locked
outside the queue, a core file it made swapped for a fresh one, its kernel killed. This
process (root) is the other student. No job starts a rank: each test takes about a second.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from _other_user import closed_to_others, other_user

import workbench
from workbench.config import ConfigError
from workbench.launch import cores
from workbench.launch import job as job_module

EMPTY = {"held": [], "waiting": []}
SMALL = dict(engine="serial", np=1, model="logreg", dataset="digits", epochs=1, max_steps=5,
             threads_per_rank=1)
ME = pwd.getpwuid(os.geteuid()).pw_name

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                       reason="acting as another user needs root and setpriv"),
    pytest.mark.skipif(closed_to_others(Path(sys.executable)) is not None,
                       reason=closed_to_others(Path(sys.executable)) or ""),
]

KERNEL = r"""
import sys
from workbench.launch import cores
tickets = {}
for line in sys.stdin:
    verb, name, *rest = line.split()
    if verb == "ask":
        tickets[name] = cores.Ticket(name, int(rest[0]), cores.settings())
    if verb in ("ask", "poll"):
        tickets[name].poll()
    elif verb == "release":
        tickets.pop(name).release()
    t = tickets.get(name)
    print(t is not None and t.granted, t.cores if t else None, t.position if t else 0,
          t.reason if t else "", sep="|", flush=True)
"""


class Kernel:
    """Another user's notebook kernel, asking for cores: `bob("ask", "b1", 1)` (and a first
    poll), `bob("poll", "b1")`, `bob("release", "b1")`; each says (granted, cores, position,
    what it waits for)."""

    def __init__(self, **env: str) -> None:
        uid, gid = other_user()
        self.uid = uid
        self.proc = subprocess.Popen(
            ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--",
             sys.executable, "-c", KERNEL],
            env={"PATH": os.environ["PATH"], "HOME": "/tmp",
                 "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
                 **{k: v for k, v in os.environ.items() if k.startswith("WORKBENCH_")}, **env},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def __call__(self, verb: str, name: str, n_cores: int = 0) -> tuple:
        self.proc.stdin.write(f"{verb} {name} {n_cores}\n")
        self.proc.stdin.flush()
        granted, held, position, reason = self.proc.stdout.readline().rstrip("\n").split("|")
        return granted == "True", eval(held), int(position), reason  # noqa: S307 - our own

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def shared(monkeypatch):
    """The shared folder as the administrator makes it (root's, 1777, under /tmp), a host of
    two cores, no per-user limit unless a test sets one."""
    folder = Path(tempfile.mkdtemp(dir="/tmp", prefix="wb-queue-"))
    folder.chmod(0o1777)
    monkeypatch.setenv(cores.ENV_SHARED_DIR, str(folder))
    monkeypatch.setenv(cores.ENV_JOBS_PER_USER, "0")
    for name in [n for n in os.environ if n.startswith("JUPYTERHUB_")]:
        monkeypatch.delenv(name)
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(before)[:2])
    kernels: list[Kernel] = []
    yield folder, kernels
    for kernel in kernels:
        kernel.kill()
    os.sched_setaffinity(0, before)
    shutil.rmtree(folder, ignore_errors=True)


def bob(kernels: list, **env: str) -> Kernel:
    kernels.append(Kernel(**env))
    return kernels[-1]


def ticket(name: str, n_cores: int) -> cores.Ticket:
    return cores.Ticket(name, n_cores, cores.settings())


needs_two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")


# ------------------------------------------------------------ who a user is
@needs_two_cores
def test_a_user_is_the_uid_the_kernel_reports_whatever_JUPYTERHUB_USER_says(shared,
                                                                            monkeypatch):
    """One running job per user: bob, claiming to be this user, neither makes this user wait
    with a core free nor escapes his own limit by claiming to be someone else."""
    folder, kernels = shared
    monkeypatch.setenv(cores.ENV_JOBS_PER_USER, "1")
    as_me = bob(kernels, JUPYTERHUB_USER=ME, WORKBENCH_JOBS_PER_USER="1")
    as_carol = bob(kernels, JUPYTERHUB_USER="carol", WORKBENCH_JOBS_PER_USER="1")
    assert as_me("ask", "b1", 1)[0]
    mine = ticket("mine", 1)
    assert mine.poll(), mine.reason                       # bob's job is bob's, not mine
    mine.release()                                        # a core is free again
    granted, _, _, reason = as_carol("ask", "b2", 1)
    assert not granted and "one of your running jobs to end" in reason and "b1" in reason
    assert cores.snapshot()["held"][0]["user"] == pwd.getpwuid(as_me.uid).pw_name


# ------------------------------------------------------------ nothing another user may write
@needs_two_cores
def test_no_file_another_user_may_write_decides_order_or_holdings(shared):
    folder, kernels = shared
    running, waiting = ticket("running", 1), ticket("waiting", 2)
    assert running.poll() and not waiting.poll()
    other = bob(kernels)
    assert not other("ask", "b1", 1)[0]                   # behind "waiting"
    for path in folder.iterdir():
        st = path.stat()
        assert not st.st_mode & 0o022, f"{path.name} is writable by others"
        assert path.name.startswith("core-") or st.st_uid in (0, other.uid)
    mine = [p for p in folder.iterdir()
            if p.stat().st_uid == 0 and p.name.startswith(("wait-", "run-"))]
    assert len(mine) == 2
    uid, gid = other_user()
    tries = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--",
         sys.executable, "-c", ATTEMPTS, str(folder), *map(str, mine)],
        capture_output=True, text=True, timeout=60)
    assert tries.returncode == 0, tries.stderr
    assert tries.stdout.split() == ["refused"] * (2 * len(mine) + 3), tries.stdout
    assert running.poll() and not waiting.poll() and waiting.position == 1
    running.release()
    assert waiting.poll() and waiting.cores == [0, 1]
    waiting.release()


ATTEMPTS = r"""
import fcntl, os, sys
folder, tickets = sys.argv[1], sys.argv[2:]
def attempt(what):
    try:
        what()
        print("done")
    except OSError:
        print("refused")
for path in tickets:
    attempt(lambda: open(path, "r+").write("{}"))            # rewrite another's ticket
    attempt(lambda: os.unlink(path))                         # drop it (the sticky bit)
attempt(lambda: open(folder + "/core-0", "r+"))              # write a core's file
attempt(lambda: os.chmod(folder + "/core-0", 0o666))
fd = os.open(folder + "/core-0", os.O_RDONLY)                # take a core in use
attempt(lambda: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB))
"""


# ------------------------------------------------------------ first come, first served
@needs_two_cores
def test_first_come_first_served_holds_against_a_ticket_dated_back(shared):
    folder, kernels = shared
    holder, first = ticket("holder", 1), ticket("first", 2)
    assert holder.poll() and not first.poll()
    other = bob(kernels)
    assert other("ask", "late", 1)[:3] == (False, None, 2)
    for path in folder.glob("wait-*"):                    # bob dates his ticket back
        if path.stat().st_uid == other.uid:
            subprocess.run(["setpriv", f"--reuid={other.uid}", f"--regid={other_user()[1]}",
                            "--clear-groups", "touch", "-d", "2000-01-01", str(path)],
                           check=True)
    granted, _, position, reason = other("poll", "late")
    assert not granted and position == 2 and "first" in reason   # a core is free: not his
    holder.release()
    assert first.poll() and not other("poll", "late")[0]
    first.release()
    assert other("poll", "late")[:2] == (True, [0])


HOLD_A_TICKET = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1] + "/wait-00000000000000ee", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
os.write(fd, sys.argv[2].encode())
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("content", ["{}", '{"run_id": "x"}', "[1]", "not json"])
def test_a_live_ticket_that_names_no_run_holds_the_queue_up_and_breaks_no_one(shared, content):
    """Another user's live ticket that says nothing readable (no run, no size, not JSON) is a
    job ahead that asked for nothing, named by its user, not an error in every poll."""
    folder, _ = shared
    uid, gid = other_user()
    holder = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                               "--", sys.executable, "-c", HOLD_A_TICKET, str(folder), content],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        mine = ticket("mine", 1)
        assert not mine.poll() and mine.position == 2
        assert f"{pwd.getpwuid(uid).pw_name}'s run ?" in mine.reason, mine.reason
        assert [e["run_id"] for e in cores.snapshot()["waiting"]] == ["?", "mine"]
    finally:
        holder.kill()
        holder.wait()
    assert mine.poll() and len(mine.cores) == 1
    mine.release()


@needs_two_cores
def test_a_job_asking_more_cores_than_the_host_has_waits_its_turn(shared):
    """It takes every core once they are all free, saying so; it never skips the queue."""
    folder, kernels = shared
    other = bob(kernels)
    assert other("ask", "b1", 1)[:2] == (True, [0])
    big = ticket("big", 3)
    assert not big.poll() and "core 0: " in big.reason and "b1" in big.reason
    small = bob(kernels)
    assert not small("ask", "b2", 1)[0]                   # behind the big one
    other("release", "b1")
    assert big.poll() and big.cores == [0, 1]
    assert big.warning == ("this job needs 3 cores and the host has 2: it takes them all, "
                           "and its ranks share them")
    big.release()
    assert small("poll", "b2")[0]


@needs_two_cores
def test_one_users_jobs_held_back_by_the_limit_or_taking_no_core_hold_up_no_one(shared,
                                                                                monkeypatch):
    folder, kernels = shared
    monkeypatch.setenv(cores.ENV_JOBS_PER_USER, "1")
    mine, again = ticket("mine", 1), ticket("again", 1)
    assert mine.poll() and not again.poll()               # a core is free, but I run one
    other = bob(kernels, WORKBENCH_JOBS_PER_USER="1")
    assert other("ask", "b1", 1)[:2] == (True, [1])       # not held up by mine
    other("release", "b1")
    both = ticket("both", 2)
    assert not both.poll()
    assert other("ask", "b0", 0)[:2] == (True, [])        # binds no core: waits for none
    mine.release()
    assert not both.poll() and again.poll()               # both asked later than again
    again.release()


# ------------------------------------------------------------ what the kernel guarantees
@needs_two_cores
def test_the_cores_of_a_kernel_that_died_are_free_at_once(shared):
    folder, kernels = shared
    other = bob(kernels)
    assert other("ask", "b1", 2)[0]
    mine = ticket("mine", 1)
    assert not mine.poll() and f"core 0: {pwd.getpwuid(other.uid).pw_name}'s run b1" in (
        mine.reason)
    other.proc.send_signal(signal.SIGKILL)
    other.proc.wait()
    assert mine.poll() and mine.cores == [0]
    assert [e["run_id"] for e in cores.snapshot()["held"]] == ["mine"]
    mine.release()


@needs_two_cores
def test_a_core_locked_outside_the_queue_is_named_by_the_kernel(shared):
    folder, kernels = shared
    made = ticket("made", 2)
    assert made.poll()
    made.release()                                        # the core files exist now
    uid, gid = other_user()
    locker = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", sys.executable,
         "-c", "import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\n"
               "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\nsys.stdin.read()",
         str(folder / "core-1")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        mine = ticket("mine", 2)
        assert not mine.poll()
        assert f"core 1: pid {locker.pid} ({pwd.getpwuid(uid).pw_name})" in mine.reason
        mine.release()
    finally:
        locker.kill()
        locker.wait()


@needs_two_cores
def test_the_user_who_made_a_core_file_cannot_hand_a_held_core_to_a_second_job(shared):
    """bob made the core files, so he may delete them: a job holding core 0 keeps it."""
    folder, kernels = shared
    other = bob(kernels)
    assert other("ask", "b1", 2)[0]
    other("release", "b1")
    assert (folder / "core-0").stat().st_uid == other.uid
    holder = ticket("holder", 1)
    assert holder.poll() and holder.cores == [0]
    uid, gid = other_user()
    subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "sh",
                    "-c", f"rm {folder}/core-0 && touch {folder}/core-0"], check=True)
    second = ticket("second", 2)
    assert not second.poll() and "core 0: " in second.reason and "holder" in second.reason
    second.release()
    holder.release()


# ------------------------------------------------------------ the shared folder itself
def test_a_students_folder_or_one_without_the_sticky_bit_is_refused_and_no_link_followed(
        tmp_path, monkeypatch):
    public = Path(tempfile.mkdtemp(dir="/tmp", prefix="wb-queue-"))
    try:
        public.chmod(0o755)
        uid, gid = other_user()
        students = public / "students"
        students.mkdir(mode=0o1777)
        os.chown(students, uid, gid)
        with pytest.raises(ConfigError, match=f"{students} is owned by wbother"):
            cores.snapshot(students)
        open_folder = public / "open"
        open_folder.mkdir()
        open_folder.chmod(0o777)
        monkeypatch.setenv(cores.ENV_SHARED_DIR, str(open_folder))
        with pytest.raises(ConfigError, match="without the sticky bit.*install -d -m 1777"):
            cores.settings()
        shared = public / "shared"
        shared.mkdir(mode=0o1777)
        victim = tmp_path / "secret"
        victim.write_text("mine")
        (shared / "core-0").symlink_to(victim)           # where a core's lock file goes
        os.chown(shared / "core-0", uid, gid, follow_symlinks=False)
        monkeypatch.setenv(cores.ENV_SHARED_DIR, str(shared))
        mine = ticket("t", 1)
        assert mine.poll() and mine.cores and 0 not in mine.cores   # core 0 is unusable
        mine.release()
        assert victim.read_text() == "mine" and (shared / "core-0").is_symlink()
    finally:
        shutil.rmtree(public, ignore_errors=True)


def test_the_queue_works_under_protected_regular_when_another_user_made_the_files(shared):
    folder, kernels = shared
    other = bob(kernels)
    assert other("ask", "b1", 2)[0]
    other("release", "b1")
    assert (folder / "core-0").stat().st_uid == other.uid
    setting = Path("/proc/sys/fs/protected_regular")
    before = setting.read_text()
    try:
        setting.write_text("1")  # as on systemd distributions
        mine = ticket("under-protected-regular", 1)
        assert mine.poll() and cores.snapshot()["held"][0]["run_id"] == mine.run_id
        mine.release()
        assert cores.snapshot() == EMPTY
    finally:
        setting.write_text(before)


# ------------------------------------------------------------ a stop always leaves the queue
def test_a_queued_job_stopped_during_a_slow_summary_write_leaves_the_queue(
        tmp_path, shared, monkeypatch):
    holder = ticket("holder", 2)
    assert holder.poll()
    job = workbench.start(workbench.JobConfig(runs_dir=str(tmp_path / "runs"), **SMALL))
    assert job.status == "queued"
    monkeypatch.setattr(job_module, "QUEUE_POLL_S", 0.02)  # it polls often while we stop
    write = job_module.write_json_atomic  # where the stop writes the summary
    monkeypatch.setattr(job_module, "write_json_atomic",  # slow, as on NFS
                        lambda *a, **kw: (time.sleep(0.6), write(*a, **kw)))
    job.stop()
    assert job.status == "stopped"
    time.sleep(0.2)
    assert not [t for t in threading.enumerate() if t.name == f"queue-{job.run_id}"]
    assert [e["run_id"] for e in cores.snapshot()["waiting"]] == []
    holder.release()
    assert cores.snapshot() == EMPTY

"""Run folders are private, and nothing is trusted from another user's (records/private.py).

Each check is made against a real second user (tests/_other_user.py): its folders and files
are truly its own, made by its own processes, and the victim is this test process.
"""

from __future__ import annotations

import json
import pickle
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _other_user import (
    as_other,
    folder_for_other,
    needs_other_user,
    open_tmp,
    other_user,
    why_not,
)

from workbench.config import ConfigError, JobConfig
from workbench.launch import start
from workbench.launch.job import Job
from workbench.rank.by_value import PAYLOAD, load_function
from workbench.rank.protocol import ENV_RUN_DIR
from workbench.rank.wrapper import main as wrapper_main
from workbench.records import new_run_dir
from workbench.records.private import ENV_RUN_FOLDERS, ForeignRecord, load_own_pickle


class Trap:
    """A pickle that, when loaded, creates the file `marker`: code run by `pickle.load`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.fixture()
def shared() -> Iterator[Path]:
    path = open_tmp("wb-private-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_run_folders_are_private_unless_the_instructor_says(shared: Path,
                                                            monkeypatch) -> None:
    _, private = new_run_dir(shared / "runs", "t")
    assert private.stat().st_mode & 0o777 == 0o700
    monkeypatch.setenv(ENV_RUN_FOLDERS, "group")
    _, group = new_run_dir(shared / "runs", "t")
    assert group.stat().st_mode & 0o777 == 0o750
    monkeypatch.setenv(ENV_RUN_FOLDERS, "everyone")
    with pytest.raises(ConfigError, match="invalid WORKBENCH_RUN_FOLDERS='everyone'"):
        new_run_dir(shared / "runs", "t")
    if why_not() is None:  # another user cannot read a private run
        (private / "user").mkdir()
        (private / PAYLOAD).write_bytes(b"code")
        seen = as_other(["cat", str(private / PAYLOAD)])
        assert seen.returncode != 0 and "Permission denied" in seen.stderr
        assert as_other(["ls", str(private)]).returncode != 0


@needs_other_user
def test_pickles_of_another_user_are_never_loaded(shared: Path, monkeypatch) -> None:
    """function.pkl and results/*.pkl in a run folder that another user made
    (e.g. swapped in for yours in a runs folder they own) are refused in one line, unrun."""
    marker = shared / "ran"
    run = folder_for_other(shared / "theirs")
    trap = pickle.dumps(Trap(marker))
    script = ("import os, sys; d = sys.argv[1]; os.makedirs(d + '/user'); "
              "os.makedirs(d + '/results');\n"
              "for name in ('user/function.pkl', 'results/rank0.pkl'):\n"
              "    open(os.path.join(d, name), 'wb').write(bytes.fromhex(sys.argv[2]))")
    made = as_other([sys.executable, "-c", script, str(run), trap.hex()])
    assert made.returncode == 0, made.stderr

    with pytest.raises(ForeignRecord) as err:
        load_function(run)
    assert "belongs to wbother" in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setenv(ENV_RUN_DIR, str(run))
    with pytest.raises(ForeignRecord):
        wrapper_main(["--fork", "1"])  # the fork launcher reads function.pkl before forking
    job = Job.__new__(Job)  # a job whose run folder was swapped for another user's
    job.run_dir, job.world_size = run, 1
    with pytest.raises(ForeignRecord):
        job.results()
    assert not marker.exists(), "a foreign pickle was loaded"

    # A folder of ours with another user's file in it, or a symlink to one: refused too.
    _, mine = new_run_dir(shared / "runs", "t")
    (mine / "results").mkdir()
    (mine / "results" / "rank0.pkl").symlink_to(run / "results" / "rank0.pkl")
    with pytest.raises(OSError):
        load_own_pickle(mine / "results" / "rank0.pkl", mine)
    # ... and our own pickle loads.
    (mine / "results" / "rank1.pkl").write_bytes(pickle.dumps({"loss": 0.5}))
    assert load_own_pickle(mine / "results" / "rank1.pkl", mine) == {"loss": 0.5}
    assert not marker.exists()


@needs_other_user
def test_resume_refuses_another_users_run_and_a_corrupt_one(shared: Path) -> None:
    """--resume would take env, sbatch_arg and hosts from the run's config.json, and load its
    checkpoint: only from a run of one's own, and a corrupt config.json is one line."""
    theirs = folder_for_other(shared / "runs" / "20260101-000000-theirs-np2-abcd")
    made = as_other(["sh", "-c", f"echo '{{\"env\": [\"X=1\"]}}' > {theirs}/config.json && "
                     f"touch {theirs}/checkpoint.pt"])
    assert made.returncode == 0, made.stderr
    with pytest.raises(ConfigError) as err:
        start(JobConfig(engine="serial", resume=str(theirs), runs_dir=str(shared / "runs")))
    message = str(err.value)
    assert message.startswith(f"invalid --resume {str(theirs)!r}: ") and "\n" not in message
    assert "belongs to wbother" in message and "resume only your own runs" in message

    _, mine = new_run_dir(shared / "mine", "t")
    (mine / "config.json").write_text('{"epochs": 3,')
    (mine / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(ConfigError) as err:
        start(JobConfig(engine="serial", resume=str(mine), runs_dir=str(shared / "mine")))
    assert "not valid JSON" in str(err.value) and "\n" not in str(err.value)


def _reads_token_when_told() -> str | None:
    """A rank's body: wait for the test's go, then return the secret variable it sees."""
    import os
    import time

    go = os.path.join(os.environ["WORKBENCH_RUN_DIR"], "go")
    while not os.path.exists(go):
        time.sleep(0.1)
    return os.environ.get("WB_TEST_TOKEN")


@pytest.mark.timeout(120)
def test_secret_env_values_reach_the_ranks_but_no_command_line_or_record(tmp_path) -> None:
    """Horovod starts even local ranks under `/bin/sh -c env K=V ... python`, which `ps`
    shows to everyone: a secret --env value must reach the ranks some other way (a 0600
    file, deleted at the end) and be in no process's command line, nor in config.json."""
    import os

    from _session_pools import rank_pids

    import workbench

    secret = "s3cr3t-" + os.urandom(8).hex()
    job = workbench.launch(_reads_token_when_told, np=2, engine="horovod", echo=False,
                           runs_dir=str(tmp_path / "runs"), env=[f"WB_TEST_TOKEN={secret}"])
    try:
        end = time.time() + 90
        while len(rank_pids(job.run_dir)) < 2 and not job.done:
            assert time.time() < end, "the ranks did not start"
            time.sleep(0.2)
        seen = []
        for proc in Path("/proc").iterdir():
            for name in ("cmdline", "environ"):
                try:
                    if secret.encode() in (proc / name).read_bytes():
                        seen.append(f"{proc.name}/{name}")
                except OSError:
                    pass
        assert not seen, f"the secret is readable in /proc/{seen}"
        file = job.run_dir / "secrets.json"
        assert file.stat().st_mode & 0o777 == 0o600
        (job.run_dir / "go").touch()
        assert job.wait(60) == "succeeded", job.summary
        assert job.results() == [secret, secret]
    finally:
        job.stop()
    assert secret not in (job.run_dir / "config.json").read_text()
    assert "WB_TEST_TOKEN" in (job.run_dir / "config.json").read_text()
    assert not file.exists()


@needs_other_user
def test_a_rank_reads_secrets_only_from_its_owners_0600_file(shared: Path) -> None:
    """The variables file must be ours and 0600: one planted by another user, or one others
    can read, ends the rank with one line rather than feeding it values."""
    from workbench.launch.environment import ranks_environment
    from workbench.rank.protocol import ENV_FILE
    from workbench.rank.wrapper import load_env_file

    _, mine = new_run_dir(shared / "runs", "t")
    path = Path(ranks_environment(JobConfig(env=["WB_TOKEN=value"]), "t", mine)[ENV_FILE])
    env = {ENV_FILE: str(path)}
    load_env_file(env)
    assert env["WB_TOKEN"] == "value"
    path.chmod(0o644)
    with pytest.raises(SystemExit, match="can be read by other users"):
        load_env_file({ENV_FILE: str(path)})
    theirs = folder_for_other(shared / "theirs")
    made = as_other(["sh", "-c", f"umask 077; echo '{{\"PATH\": \"/evil\"}}' > "
                                 f"{theirs}/secrets.json"])
    assert made.returncode == 0, made.stderr
    with pytest.raises(SystemExit, match="belongs to wbother"):
        load_env_file({ENV_FILE: str(theirs / "secrets.json")})


# ---------------------------------------------------------------------- modes, caps, sharing
def _returns(value):
    return value


def _naps(seconds: float) -> float:
    import time

    time.sleep(seconds)
    return seconds


def _returns_too_much() -> bytes:
    from workbench.records.private import MAX_RETURN_BYTES

    return b"x" * (MAX_RETURN_BYTES + 1)


@pytest.mark.timeout(120)
def test_a_umask_of_000_leaves_nothing_of_a_run_that_another_user_may_write(tmp_path) -> None:
    import os

    import workbench

    before = os.umask(0)
    try:
        job = workbench.launch(_returns, 1, np=2, engine="fork", echo=False,
                               runs_dir=str(tmp_path / "runs"))
        assert job.wait(60) == "succeeded", job.summary
    finally:
        os.umask(before)
    assert job.results() == [1, 1]
    made = [tmp_path / "runs", *(tmp_path / "runs").rglob("*")]
    assert [p for p in made if p.lstat().st_mode & 0o022] == []


@needs_other_user
@pytest.mark.timeout(120)
def test_in_shared_mode_another_user_cannot_forge_an_exit_record(monkeypatch) -> None:
    """A runs folder shared with another user's group, a umask of 002 (Debian's, for users
    with a group of their own): the run's folders would be that group's to write into."""
    import os

    import workbench
    _, gid = other_user()
    base = open_tmp("wb-forge-")
    runs = base / "runs"
    runs.mkdir()
    os.chown(runs, 0, gid)
    runs.chmod(0o3775)
    monkeypatch.setenv(ENV_RUN_FOLDERS, "shared")
    before = os.umask(0o002)
    try:
        job = workbench.launch(_naps, 2.0, np=1, engine="fork", echo=False, runs_dir=str(runs))
    finally:
        os.umask(before)
    try:
        forged = '{"ok": false, "error": "forged", "time": 0}'
        beat = f'{{"exit": {forged}}}'
        tried = as_other(["sh", "-c", f"echo '{forged}' > {job.run_dir}/exit/rank0.json; "
                                      f"echo '{beat}' > {job.run_dir}/heartbeat/rank0"])
        assert tried.stderr.count("Permission denied") == 2, tried.stderr
        assert job.wait(60) == "succeeded", job.summary
    finally:
        job.stop()
        shutil.rmtree(base, ignore_errors=True)


@needs_other_user
@pytest.mark.timeout(180)
def test_one_runs_folder_for_several_users_lists_each_their_own_and_caches_apart() -> None:
    import torch

    from workbench.training.setup import build

    base = open_tmp("wb-runs-")
    runs = base / "runs"
    runs.mkdir()
    runs.chmod(0o1777)
    try:
        _, mine = new_run_dir(runs, "mine")
        (mine / "config.json").write_text("{}")
        cfg = JobConfig(engine="serial", model="logreg", dataset="digits", runs_dir=str(runs))
        build(cfg, torch.device("cpu"))                  # my cache of the prepared data
        theirs = as_other([sys.executable, "-c", (
            "import sys, torch\nfrom workbench.config import JobConfig\n"
            "from workbench.records import new_run_dir\n"
            "from workbench.training.setup import build\n"
            "run_id, run = new_run_dir(sys.argv[1], 'theirs')\n"
            "(run / 'config.json').write_text('{}')\n"
            "build(JobConfig(engine='serial', model='logreg', dataset='digits', "
            "runs_dir=sys.argv[1]), torch.device('cpu'))\nprint(run_id)"), str(runs)],
            env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
        assert theirs.returncode == 0, theirs.stderr
        listed = as_other([sys.executable, "-m", "workbench.cli", "runs", "--runs-dir",
                           str(runs), "--json"], env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
        assert listed.returncode == 0, listed.stderr
        assert [r["run_id"] for r in json.loads(listed.stdout)] == [theirs.stdout.strip()]
        caches = {p.stat().st_uid: p.stat().st_mode & 0o777 for p in runs.glob(".cache-uid*")}
        assert caches == {0: 0o700, other_user()[0]: 0o700}, caches
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(120)
def test_returns_and_logs_are_capped_saying_so(tmp_path) -> None:
    import psutil

    import workbench

    me = psutil.Process()
    rss = me.memory_info().rss
    job = workbench.launch(_returns_too_much, np=1, engine="fork", echo=False,
                           runs_dir=str(tmp_path / "runs"))
    assert job.wait(60) == "failed"
    assert "returned 64 MiB, more than the 64 MiB a return value may hold" in (
        job.summary["failure"]["error"])
    log = job.run_dir / "logs" / "rank0.log"
    with open(log, "ab") as f:                           # a rank that printed a GiB
        f.truncate(1 << 30)
        f.seek(0, 2)
        f.write(b"\nthe last line\n")
    text = job.record().log(0)
    assert text == (f"[1,020.0 MiB before these lines: see {log}]\nthe last line\n")
    assert job.record().log(0, last=1) == "the last line"
    assert me.memory_info().rss - rss < 48 << 20


STUDENTS_RUN = """
import os, sys
from workbench.records import new_run_dir, write_json_atomic
from workbench.records.store import open_file
os.umask(int(sys.argv[2], 8))
run_id, run = new_run_dir(sys.argv[1], "t")
write_json_atomic(run / "config.json", {"engine": "serial"})
os.write(open_file(run / "logs" / "rank0.log"), b"epoch 1\\n")
"""


@needs_other_user
@pytest.mark.timeout(240)
def test_the_course_folder_of_docs_classroom_works_as_written_for_two_students() -> None:
    """docs/classroom.md's commands, run as written (a group of this test's own for the
    instructors): two students each run a job in the course folder; neither can read the
    other's, an instructor reads both. (Each makes a run as a job does, not a whole job: this
    checkout's Python, under /root, is no launcher that another user may start.)"""
    import re
    import subprocess

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "classroom.md").read_text()
    [make] = re.findall(r"^ *(install -d -m \d+ -o root -g instructors /srv/course-runs)$",
                        doc, re.MULTILINE)
    assert "WORKBENCH_RUN_FOLDERS=group" in doc and "`/srv/course-runs/$USER`" in doc
    subprocess.run(["groupadd", "-f", "wbinstructors"], check=True)
    students = ["wbother", "wbother2"]
    for name in students:
        other_user(name)
    other_user("wbteacher")
    subprocess.run(["usermod", "-a", "-G", "wbinstructors", "wbteacher"], check=True)
    base = open_tmp("wb-course-")
    course, queue = base / "course-runs", base / "queue"
    try:
        subprocess.run(make.replace("instructors", "wbinstructors")
                       .replace("/srv/course-runs", str(course)).split(), check=True)
        subprocess.run(["install", "-d", "-m", "1777", str(queue)], check=True)
        env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "WORKBENCH_RUN_FOLDERS": "group",
               "WORKBENCH_SHARED_DIR": str(queue)}
        for name, umask in zip(students, ("022", "002"), strict=True):  # 002: Debian's
            ran = as_other([sys.executable, "-c", STUDENTS_RUN, f"{course}/{name}", umask],
                           name=name, env=env)  # what a job makes first (job.py), its log
            assert ran.returncode == 0, ran.stdout + ran.stderr
        first = next((course / "wbother").glob("*/config.json"))
        for who, path in (("wbother2", first), ("wbother2", first.parent.parent),
                          ("wbother", course)):
            denied = as_other(["ls", str(path)], name=who)
            assert denied.returncode != 0 and "Permission denied" in denied.stderr, (who, path)
        for name in students:
            seen = as_other(["cat", *map(str, (course / name).glob("*/config.json"))],
                            name="wbteacher")
            assert seen.returncode == 0 and '"engine": "serial"' in seen.stdout, seen.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)

"""Run folders are private, and nothing is trusted from another user's (records/private.py).

Each check is made against a real second user (tests/_other_user.py): its folders and files
are truly its own, made by its own processes, and the victim is this test process.
"""

from __future__ import annotations

import pickle
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _other_user import as_other, folder_for_other, needs_other_user, open_tmp, why_not

from workbench.config import ConfigError, JobConfig
from workbench.launch import start
from workbench.launch.job import Job
from workbench.rank.by_value import PAYLOAD, run_function
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
        run_function(run / PAYLOAD, run)
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

    import workbench
    from workbench.launch.processes import rank_pids

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
    from workbench.launch.environment import write_env_file
    from workbench.rank.protocol import ENV_FILE, load_env_file

    _, mine = new_run_dir(shared / "runs", "t")
    path = write_env_file(mine, {"WB_TOKEN": "value"})
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

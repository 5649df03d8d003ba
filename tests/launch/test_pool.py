"""Warm ranks (`workbench.ranks`): real horovodrun and torchrun pools, one per engine.

Each engine's pool is started once for this module (a torch import per rank costs seconds)
and every test asks it many things. The functions are defined in this file, which the ranks
cannot import: they travel by value, as from a notebook. The pools of the two engines never
live at the same time (the fixture is parametrized by module), so neither waits in the
host's core queue behind the other.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from _other_user import folder_for_other, needs_other_user
from _session_pools import rank_pids

import workbench
from workbench.config import ConfigError
from workbench.launch import job as job_module
from workbench.launch.pool_call import WarmRanks
from workbench.records import list_runs, read_json
from workbench.ui import RunPanel
from workbench.ui.run_controls import what_ran

ROOT = Path(__file__).resolve().parents[2]
SEEN = []  # a global the calls change: each call must start from a fresh copy


def sum_of_ranks(steps):
    """A collective of the engine, reports and a print: what a lesson's cell does."""
    import torch

    SEEN.append(workbench.rank())
    t = torch.tensor([workbench.rank() + 1.0])
    if os.environ.get("HOROVOD_RANK") is not None:
        import horovod.torch as hvd

        hvd.init()                       # already done by the pool: does nothing
        t = hvd.allreduce(t, op=hvd.Sum)
    else:
        import torch.distributed as dist

        dist.init_process_group("gloo")  # already done by the pool: does nothing
        dist.all_reduce(t)
    for step in range(steps):
        workbench.report(step=step, loss=1.0 / (step + 1), samples=4)
    print("rank", workbench.rank(), "of", workbench.size(), "sum", t.item())
    return {"rank": workbench.rank(), "sum": t.item(), "pid": os.getpid(), "seen": len(SEEN)}


def _check_bad(x):
    if workbench.rank() == 1:
        raise ValueError(f"rank one dislikes {x}")


def fails_on_rank_one(x):
    _check_bad(x)
    return x


def counts_kept():
    """Counts its calls in what the rank keeps on purpose, and in a global that it must not."""
    SEEN.append(1)
    kept = workbench.kept()
    kept["calls"] = kept.get("calls", 0) + 1
    return kept["calls"], len(SEEN)


def leaves_its_peer_in_a_collective():
    """Rank 1 raises; rank 0 goes on into an all-reduce that rank 1 never joins."""
    import torch

    if workbench.rank() == 1:
        raise ValueError("rank one leaves before the all-reduce")
    t = torch.ones(1)
    if os.environ.get("HOROVOD_RANK") is not None:
        import horovod.torch as hvd

        hvd.allreduce(t)
    else:
        import torch.distributed as dist

        dist.all_reduce(t)


def sleeps():
    workbench.report(step=0, loss=1.0)
    time.sleep(600)


def naps(seconds):
    time.sleep(seconds)
    return workbench.rank()


@pytest.fixture(scope="module", params=["torch", "horovod"])
def pool(request, tmp_path_factory):
    """The module's pool. It binds no cores: holding the host's cores for minutes, it would
    make every other test worker's job queue behind it (the cores a pool holds are
    checked in a queue of their own below)."""
    runs = tmp_path_factory.mktemp(f"runs-{request.param}")
    pool = workbench.ranks(np=2, engine=request.param, runs_dir=str(runs), cpu_bind="none")
    pool.wait_ready(240)
    yield pool
    pool.close()
    assert pool.job.wait(30) in ("succeeded", "stopped")
    assert not [p for p in psutil.process_iter() if _of_job(p, pool.job.run_id)]


def _of_job(proc: psutil.Process, run_id: str) -> bool:
    try:
        return proc.environ().get("WORKBENCH_RUN_ID") == run_id
    except psutil.Error:
        return False


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_call(job, timeout=60.0):
    assert job.wait(timeout) in ("succeeded", "failed", "stopped"), job
    return job.status


@pytest.mark.timeout(300)
def test_a_warm_call_is_a_job_on_record_with_results_reports_and_a_panel(pool):
    first = pool.run(sum_of_ranks, 3)
    assert isinstance(first.launcher, WarmRanks)
    assert _wait_call(first) == "succeeded", first.summary
    values = first.results()
    assert [v["rank"] for v in values] == [0, 1] and {v["sum"] for v in values} == {3.0}
    second = pool.run(sum_of_ranks, 3)
    assert _wait_call(second) == "succeeded", second.summary
    again = second.results()
    assert [v["pid"] for v in again] == [v["pid"] for v in values]  # the same warm ranks
    assert [v["seen"] for v in again] == [1, 1]                     # a fresh namespace
    assert list(rank_pids(second.run_dir).values()) == [v["pid"] for v in values]
    steps = sorted((m["rank"], m["step"]) for m in second.metrics() if m["kind"] == "step")
    assert steps == [(r, s) for r in (0, 1) for s in range(3)]
    assert second.record().log(1).strip().endswith("rank 1 of 2 sum 3.0")
    summary = read_json(second.run_dir / "summary.json")
    assert summary["status"] == "succeeded" and summary["pool"] == pool.job.run_id
    assert summary["steps_completed"] == 3 and summary["engine"] == pool.engine
    assert {r.run_id for r in list_runs(pool.runs_dir)} >= {first.run_id, second.run_id,
                                                            pool.job.run_id}
    # launch() takes the idle pool that can run it (its engine, size, runs folder and
    # binding): the same ranks, no launcher
    launched = workbench.launch(sum_of_ranks, 2, np=2, engine=pool.engine, echo=False,
                                runs_dir=pool.runs_dir, cpu_bind="none")
    assert isinstance(launched.launcher, WarmRanks) and _wait_call(launched) == "succeeded"
    assert what_ran(launched.record().config) == "sum_of_ranks()"
    assert [v["pid"] for v in launched.results()] == [v["pid"] for v in values]
    # ... also while a call still runs there: it queues behind that call at once, saying so
    # (not for fresh ranks, which would queue behind the cores the pool holds)
    napping = pool.run(naps, 1.0)
    asked = time.monotonic()
    after_nap = workbench.launch(sum_of_ranks, 1, np=2, engine=pool.engine, echo=False,
                                 runs_dir=pool.runs_dir, cpu_bind="none")
    assert time.monotonic() - asked < 1 and after_nap.status == "queued"
    assert f"your warm pool: a call run {napping.run_id} (running" in after_nap.waiting_for
    assert isinstance(after_nap.launcher, WarmRanks) and _wait_call(after_nap) == "succeeded"
    assert napping.status == "succeeded" and napping.results() == [0, 1]
    panel = RunPanel(pool.run(sum_of_ranks, 4))
    try:
        deadline = time.monotonic() + 60
        while panel.running() and time.monotonic() < deadline:
            panel.refresh()
            time.sleep(0.1)
        assert panel.sources["rank1"].data["loss"] == [1.0, 0.5, 1 / 3, 0.25]
        assert "succeeded" in panel.status.value
    finally:
        panel.close()
    with pytest.raises(workbench.ConfigError, match="cannot be pickled"):
        pool.run(lambda lock: None, threading.Lock())
    assert pool.restarts == []


#: The training engines each pool runs: every torch.distributed engine on torchrun's ranks.
TRAINED_ON = {"torch": ("torch", "zero1", "fsdp", "overlapped"), "horovod": ("horovod",)}


@pytest.mark.timeout(300)
def test_training_jobs_run_on_the_warm_ranks_and_match_fresh_ranks(pool):
    """workbench.start() takes the waiting pool: the engine's own rank module on the same
    ranks, a record like any job's, the traffic counted afresh each time; and the same
    parameters, bit for bit, as the same job on ranks of its own."""
    job = dict(np=2, model="mlp", width=32, dataset="digits", epochs=1, max_steps=4,
               threads_per_rank=1, runs_dir=pool.runs_dir, cpu_bind="none")
    pids = [p for _, p in sorted(pool._ranks.pids.items())]
    warm = {}
    for engine in TRAINED_ON[pool.engine] * 2:   # twice: a second job starts clean too
        run = workbench.start(workbench.JobConfig(engine=engine, **job))
        assert isinstance(run.launcher, WarmRanks)
        assert _wait_call(run) == "succeeded", run.summary
        assert list(rank_pids(run.run_dir).values()) == pids
        assert run.summary["steps_completed"] == 4 and run.summary["engine"] == engine
        steps = [m for m in run.metrics() if m["kind"] == "step"]
        assert len(steps) == 8 and all(m.get("sent_bytes", 1) > 0 for m in steps)
        assert engine not in warm or run.summary["final_loss"] == warm[engine]["final_loss"]
        warm[engine] = run.summary
    last = run.record().model_state()
    # cpu_bind is fixed when a rank starts: a job binding cores needs ranks of its own
    bound = {**job, "cpu_bind": "core"}
    with pytest.raises(workbench.ConfigError, match="cpu_bind, fixed when a rank"):
        pool.start(workbench.JobConfig(engine=engine, **bound))
    with pytest.raises(workbench.ConfigError, match="has 3 ranks and the pool 2"):
        pool.start(workbench.JobConfig(engine=engine, **{**job, "np": 3}))
    fresh = workbench.start(workbench.JobConfig(engine=engine, **bound))
    assert not isinstance(fresh.launcher, WarmRanks)
    assert fresh.wait(240) == "succeeded", fresh.summary
    state = fresh.record().model_state()
    assert state.keys() == last.keys() and all((state[k] == last[k]).all() for k in state)
    assert pool.restarts == []


@pytest.mark.timeout(300)
def test_a_pool_holds_its_cores_and_a_job_queued_behind_them_is_told(tmp_path, monkeypatch):
    """A pool's ranks hold their cores in the host's queue while they live (here a queue of
    its own: the suite's other workers must not wait behind it); a job of the same process
    that then queues names the pool's run; one the pool's launcher starts borrows its
    cores; and they are free once the pool is closed."""
    from workbench.hosts.cpu import affinity

    monkeypatch.setenv("WORKBENCH_SHARED_DIR", str(tmp_path / "shared"))
    host = len(affinity())
    threads = max(1, host // 2)       # the pool holds every core (all but one, if odd)
    pool = workbench.ranks(np=2, engine="torch", runs_dir=str(tmp_path / "runs"),
                           threads_per_rank=threads)
    pool.wait_ready(240)
    assert len(set(pool.job.cores)) == 2 * threads
    job = workbench.start(workbench.JobConfig(  # one core more than the pool leaves
        engine="serial", np=1, model="logreg", epochs=1, max_steps=2,
        threads_per_rank=host - 2 * threads + 1, runs_dir=str(tmp_path / "runs")))
    assert job.status == "queued" and not isinstance(job.launcher, WarmRanks)
    assert f"'s run {pool.job.run_id} (" in job.waiting_for, job.waiting_for
    job.stop()
    # A job of the pool's launcher that the pool cannot run (another size) borrows its
    # cores while it is idle, at once; the pool's calls wait for the loan to end.
    borrower = workbench.launch(naps, 1.0, np=1, engine="torch", echo=False,
                                threads_per_rank=threads, runs_dir=str(tmp_path / "runs"))
    assert borrower.status == "running" and set(borrower.cores) <= set(pool.job.cores)
    call = pool.run(naps, 0.0)
    assert call.status == "queued" and "a loan of its cores to run " in call.waiting_for
    assert borrower.wait(120) == "succeeded" and _wait_call(call) == "succeeded"
    pool.close()
    later = workbench.start(workbench.JobConfig(
        engine="serial", np=1, model="logreg", epochs=1, max_steps=2, threads_per_rank=1,
        runs_dir=str(tmp_path / "runs")))
    assert later.status == "running" and later.wait(120) == "succeeded", later.summary


@pytest.mark.timeout(300)
def test_a_raising_rank_is_named_and_the_pool_runs_on(pool):
    job = pool.run(fails_on_rank_one, 7)
    assert _wait_call(job) == "failed"
    failure = job.summary["failure"]
    assert failure["rank"] == 1 and failure["error"] == "ValueError: rank one dislikes 7"
    assert "_check_bad" in failure["traceback"] and "rank/pool.py" not in failure["traceback"]
    assert "ValueError: rank one dislikes 7" in job.record().log(1)
    assert job.summary["interrupted_ranks"] == []   # rank 0 returned by itself: no restart
    ok = pool.run(sum_of_ranks, 1)
    assert _wait_call(ok) == "succeeded" and pool.restarts == []


@pytest.mark.timeout(300)
def test_a_call_that_cannot_start_leaves_the_pools_line(pool, monkeypatch):
    """A call whose run folder cannot be made (here: the name another run drew in the same
    second, which a suite run met) fails in one line and gives up its place: before, it
    stayed first in the pool's line, and every later call queued behind it for ever."""
    def taken(runs_dir, label):
        raise ConfigError(f"invalid --runs-dir {runs_dir!r}: cannot create it (File exists)")

    with monkeypatch.context() as patch:
        patch.setattr(job_module, "new_run_dir", taken)
        with pytest.raises(ConfigError, match="File exists"):
            pool.run(sum_of_ranks, 1)
    assert pool.line == []
    after = pool.run(sum_of_ranks, 1)
    assert after.wait(60) == "succeeded", (after.status, after.waiting_for)


@pytest.mark.timeout(300)
def test_calls_asked_at_once_queue_in_order_and_a_launched_call_keeps_its_timeout(pool):
    """Two threads ask while a call runs: both queue behind it, each gets its own replies;
    a call's stall_timeout (pool.run's on one engine, launch()'s on the other) holds on the
    pool's ranks, which are interrupted and replaced."""
    pool.wait_ready(240)
    busy, racing = pool.run(naps, 1.0), []
    threads = [threading.Thread(target=lambda: racing.append(pool.run(sum_of_ranks, 1)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [c.status for c in racing] == ["queued", "queued"]
    assert sorted(c.queue_position for c in racing) == [2, 3]
    assert all(f"a call run {busy.run_id} (running" in c.waiting_for for c in racing)
    assert [_wait_call(c) for c in racing] == ["succeeded", "succeeded"]
    assert [[v["rank"] for v in c.results()] for c in racing] == [[0, 1], [0, 1]]
    assert busy.results() == [0, 1]
    restarts = len(pool.restarts)
    slow = pool.run(sleeps, stall_timeout=2.0) if pool.engine == "torch" else workbench.launch(
        sleeps, np=2, engine=pool.engine, echo=False, cpu_bind="none", runs_dir=pool.runs_dir,
        stall_timeout=2.0)
    assert isinstance(slow.launcher, WarmRanks) and slow.wait(60) == "stalled", slow.summary
    assert "no progress for 2 s" in slow.summary["failure"]["error"]
    assert len(pool.restarts) == restarts + 1


@pytest.mark.timeout(300)
def test_nothing_leaks_from_call_to_call_but_what_is_kept_on_purpose(pool):
    def done(call):
        _wait_call(call)
        return call

    first, second = (done(pool.run(counts_kept)).results() for _ in range(2))
    assert [kept for kept, _ in second] == [kept + 1 for kept, _ in first]   # kept()
    assert [seen for _, seen in first + second] == [1, 1, 1, 1]              # not a global
    assert done(pool.run_code("x = 1")).status == "succeeded"
    plain = done(pool.run_code("print(x)"))                                  # fresh per cell
    assert plain.status == "failed" and "NameError" in plain.summary["failure"]["error"]
    assert done(pool.run_code("y = 41", keep=True)).status == "succeeded"
    kept = done(pool.run_code("print(y + 1)", keep=True))                    # --keep cells
    assert kept.status == "succeeded" and kept.record().log(0).strip().endswith("42")
    assert done(pool.run_code("print(y)")).status == "failed", "plain cells never see them"
    # what a cell sets in os.environ is undone after it; a thread it leaves running would
    # run on into the next call, so the pool restarts its ranks and says why
    assert done(pool.run_code("import os; os.environ['LEAK'] = '1'")).status == "succeeded"
    clean = done(pool.run_code("import os; assert 'LEAK' not in os.environ", keep=True))
    assert clean.status == "succeeded", clean.summary
    restarts = len(pool.restarts)
    leaky = done(pool.run_code("import threading, time\nthreading.Thread(target=time.sleep, "
                               "args=(600,), name='leaky', daemon=True).start()"))
    assert leaky.status == "succeeded", leaky.summary
    assert leaky.summary["threads_left"] == {"0": ["leaky"], "1": ["leaky"]}
    assert len(pool.restarts) == restarts + 1 and "left threads running" in pool.restarts[-1]
    pool.wait_ready(240)
    gone = "import threading; assert 'leaky' not in [t.name for t in threading.enumerate()]"
    assert done(pool.run_code(gone)).status == "succeeded"


@pytest.mark.timeout(300)
def test_a_call_left_inside_a_collective_restarts_the_ranks(pool):
    pool.wait_ready(240)
    before = pool.run(sum_of_ranks, 1)
    assert _wait_call(before) == "succeeded"
    restarts = len(pool.restarts)
    job = pool.run(leaves_its_peer_in_a_collective)
    assert _wait_call(job, 90) == "failed"
    failure = job.summary["failure"]
    assert failure["rank"] == 1, failure
    assert failure["error"] == "ValueError: rank one leaves before the all-reduce"
    assert job.summary["interrupted_ranks"] == [0]     # rank 0 still waited for its peer
    assert len(pool.restarts) == restarts + 1, pool.restarts
    pool.wait_ready(240)
    after = pool.run(sum_of_ranks, 1)                  # the next collective is whole again
    assert _wait_call(after) == "succeeded", after.summary
    assert {v["sum"] for v in after.results()} == {3.0}
    assert not {v["pid"] for v in after.results()} & {v["pid"] for v in before.results()}


@pytest.mark.timeout(400)
def test_stop_interrupts_every_rank_and_a_killed_rank_is_named_and_replaced(pool):
    pool.wait_ready(240)  # the previous test's stop restarted the ranks
    job = pool.run(sleeps)
    _until(lambda: len([m for m in job.metrics() if m["kind"] == "step"]) == 2, 60)
    started = time.monotonic()
    job.stop()
    assert job.status == "stopped" and time.monotonic() - started < 10
    for rank in (0, 1):  # interrupted inside time.sleep, on every rank
        record = read_json(job.run_dir / "exit" / f"rank{rank}.json")
        assert record["error"].startswith("KeyboardInterrupt"), record
    assert job.summary["interrupted_ranks"] == [0, 1] and len(pool.restarts) >= 1
    pool.wait_ready(240)
    victim_job = pool.run(sleeps)
    _until(lambda: len(rank_pids(victim_job.run_dir)) == 2, 60)
    victim = rank_pids(victim_job.run_dir)[1]
    os.kill(victim, signal.SIGKILL)
    assert _wait_call(victim_job, 30) == "failed"
    failure = victim_job.summary["failure"]
    assert failure["rank"] == 1 and f"pid {victim}" in failure["error"], failure
    assert "killed by a signal" in failure["error"]
    pool.wait_ready(240)
    after = pool.run(sum_of_ranks, 1)
    assert _wait_call(after) == "succeeded"
    assert victim not in [v["pid"] for v in after.results()]
    assert any(f"pid {victim}" in why for why in pool.restarts), pool.restarts


OWNER = """
import sys, workbench
pool = workbench.ranks(np=2, engine=sys.argv[2], runs_dir=sys.argv[1]).wait_ready(240)
print(pool.job.run_id, flush=True)
import time; time.sleep(600)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ["horovod", "torch"])
def test_a_killed_kernel_leaves_no_process(tmp_path, engine):
    env = {**os.environ, "PYTHONPATH": str(ROOT),  # its own core queue: ours is taken
           "WORKBENCH_SHARED_DIR": str(tmp_path / "shared")}
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "runs"), engine],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        run_id = owner.stdout.readline().strip()
        assert run_id, "the pool did not start"
        tree = [p.pid for p in psutil.Process(owner.pid).children(recursive=True)]
        assert len([p for p in psutil.process_iter() if _of_job(p, run_id)]) >= 2
    finally:
        owner.kill()
        owner.wait()
    _until(lambda: not [p for p in psutil.process_iter()
                        if _of_job(p, run_id) or (p.pid in tree and _running(p))], 30)


def _until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _full_disk(tmp_path: Path) -> Path:
    """A 16 MiB file system of its own, for a runs folder that will fill up."""
    full = tmp_path / "small-disk"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(full)], check=True)
    return full


def _fill(folder: Path) -> None:
    with open(folder / "filler", "wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"x" * (1 << 20))
            f.flush()


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: mounts a tmpfs")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cause", [
    pytest.param("another user's queue folder", marks=needs_other_user),
    pytest.param("a full disk", marks=needs_root)])
def test_a_restart_that_fails_fails_the_pool_in_one_line_and_nothing_spins(tmp_path,
                                                                           monkeypatch, cause):
    """Stop a call and the ranks are restarted; if that cannot be done (the core queue's
    folder has become another user's, or the runs folder's disk is full), the stop is
    still a stop, the pool says why in one line, and a later call is refused at once, with
    no thread spinning meanwhile."""
    runs = _full_disk(tmp_path) if cause == "a full disk" else tmp_path / "runs"
    pool = None
    try:
        pool = workbench.ranks(np=2, engine="torch", runs_dir=str(runs),
                               cpu_bind="none").wait_ready(240)
        call = pool.run(sleeps)
        _until(lambda: any(m["kind"] == "step" for m in call.metrics()), 60)
        if cause == "a full disk":
            _fill(runs)
            why = "No space left on device"
        else:
            theirs = folder_for_other(tmp_path / "theirs")
            monkeypatch.setenv("WORKBENCH_SHARED_DIR", str(theirs))
            why = "is owned by wbother"
        call.stop()
        if cause == "a full disk":  # nor can its summary be written: it says so
            assert call.status == "failed" and why in call.summary["failure"]["error"]
        else:
            assert call.status == "stopped", call.summary
        assert pool.failed and "\n" not in pool.failed
        assert "could not restart its ranks" in pool.failed and why in pool.failed, pool.failed
        cpu = psutil.Process().cpu_times()
        with pytest.raises(RuntimeError) as refused:
            pool.run(naps, 0.0)
        time.sleep(1.0)
        spent = sum(psutil.Process().cpu_times()[:2]) - sum(cpu[:2])
        assert str(refused.value) == pool.failed and spent < 0.3, spent
    finally:
        if pool is not None:
            pool.close()
            pool.job.wait(30)
        if cause == "a full disk":
            subprocess.run(["umount", "--lazy", str(runs)], check=False)


def test_ranks_are_ended_once_whichever_threads_ask():
    """A failed restart's thread and close() may both end the same ranks: the second waits
    for the first and closes no socket again (a descriptor closed twice at once can be
    another's, reused meanwhile)."""
    from multiprocessing import Pipe

    from workbench.launch.pool import _Ranks

    stops, ours, theirs = [], *Pipe()
    ranks = _Ranks.__new__(_Ranks)
    ranks.__dict__.update(
        pool=type("P", (), {"np": 1})(), conns={0: ours}, server=theirs, ended=False,
        _ending=threading.Lock(),
        job=type("J", (), {"wait": lambda self, _s: time.sleep(0.2),
                           "stop": lambda self: stops.append(1)})())
    threads = [threading.Thread(target=ranks.end) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert stops == [1] and ours.closed and theirs.closed

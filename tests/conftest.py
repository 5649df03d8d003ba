"""Settings and clean-up every test shares.

Jobs share a host's cores through a folder (workbench/launch/cores.py). Each test session gets
a folder of its own, so two sessions on one machine, or a notebook left running, do not queue
behind each other's jobs; and no per-user limit, even in a hub's terminal. Tests of the
sharing itself set their own values.

A job must not outlive the test that started it: a test that fails half-way would otherwise
leave its job training (and holding cores, so later tests queue behind it) until the session
ends. After each test, every job this process started and that still runs is stopped;
pools of warm ranks, at the end of the module (the `warm` fixture's torchrun ranks, at the end
of the session).

The whole suite has a time budget (tests/_budget.py): `make test` fails when it takes longer.
A notebook whose kernel died before it ran a cell (a port taken between jupyter_client's
choice and the kernel's bind) is run again (tests/_kernel_start.py).

A suite started in the background by a shell without job control (`make test &` in a
script) inherits SIGINT ignored, and so would every process it starts, which then cannot be
stopped with Ctrl-C: the tests of Ctrl-C set it back first.

No test writes into the runner's home: a learner's quiz answers and id (workbench/quiz/
record.py) go to a folder of this process's own, which the notebooks' kernels inherit (the
solution of exercise 07 reveals every key, and so records a 0 for every question), and to
a folder of each test's own, so that no test sees answers another one gave.
"""

import atexit
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from _budget import register
from _kernel_start import pytest_collection_modifyitems  # noqa: F401 (a pytest hook)
from _session_pools import SESSION_POOLS

import workbench

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # see the module docstring
    signal.signal(signal.SIGINT, signal.default_int_handler)

if "WORKBENCH_SHARED_DIR" not in os.environ:  # (pytest-xdist's workers inherit the folder)
    os.environ["WORKBENCH_SHARED_DIR"] = tempfile.mkdtemp(prefix="workbench-tests-")
    atexit.register(shutil.rmtree, os.environ["WORKBENCH_SHARED_DIR"], ignore_errors=True)
os.environ.setdefault("WORKBENCH_JOBS_PER_USER", "0")
os.environ["WORKBENCH_LEARNER_DIR"] = tempfile.mkdtemp(prefix="workbench-learner-")
atexit.register(shutil.rmtree, os.environ["WORKBENCH_LEARNER_DIR"], ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    register(config, Path(__file__).parent)  # a whole-suite run over budget fails


@pytest.fixture(autouse=True)
def _learner_of_its_own(monkeypatch, tmp_path_factory):
    """Each test's learner starts with no quiz answers (see the module docstring)."""
    monkeypatch.setenv("WORKBENCH_LEARNER_DIR", str(tmp_path_factory.mktemp("learner")))


@pytest.fixture(autouse=True)
def _no_job_outlives_its_test():
    """Every job a test started is stopped after it, but the ranks of a pool of warm ranks
    (workbench.ranks), which a fixture keeps from one test to the next."""
    yield
    from workbench.launch.job import _LIVE_JOBS
    from workbench.launch.pool_call import POOLS

    pools = {pool.job for pool in POOLS.values()}
    for job in list(_LIVE_JOBS):
        if job not in pools and not job.done:
            job.stop()


@pytest.fixture(scope="module", autouse=True)
def _no_pool_outlives_its_module():
    """Pools end with the module that started them, but the session's warm ranks."""
    yield
    from workbench.launch.pool_call import POOLS

    for pool in list(POOLS.values()):
        if pool not in SESSION_POOLS:
            pool.close()


@pytest.fixture(scope="session")
def warm(tmp_path_factory):
    """Warm ranks for 2-rank training runs: `warm(engine)` makes sure a pool of that engine's
    launcher waits (torchrun for every torch.distributed engine, horovodrun for Horovod) and
    returns the folder whose runs/ it keeps. A job started there with `cpu_bind="none"` runs
    as a call, the engine's own rank module on ranks already started (launch/pool.py;
    launch/test_pool.py checks that it equals the job on fresh ranks): no torchrun or horovodrun
    start-up per job. The pools bind no cores, so other jobs never queue behind their idle
    ranks, and a job started anywhere else never runs on them (a pool serves only the jobs
    of its own runs folder).

    torchrun's ranks serve every module of the session: waiting, they take next to no CPU.
    Horovod's ranks do not wait quietly (Horovod's background thread wakes every
    HOROVOD_CYCLE_TIME, 1 ms), so they end with the module, or as soon as a test asks for
    torch's ranks: run one module's Horovod jobs together."""
    root = tmp_path_factory.mktemp("warm")
    pools: dict = {}

    def get(engine: str) -> Path:
        family = "horovod" if engine == "horovod" else "torch"
        if family == "torch" and "horovod" in pools:
            pools.pop("horovod").close()
        if family not in pools or not pools[family].alive:
            pools[family] = workbench.ranks(np=2, engine=family, runs_dir=str(root / "runs"),
                                            cpu_bind="none")
            if family == "torch":
                SESSION_POOLS.append(pools[family])
        return root

    yield get
    for pool in pools.values():
        pool.close()

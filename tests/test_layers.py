"""What a rank process loads: the rank side of the package, never the launcher or the UI.

A rank imports `workbench.training...` (or another rank module), and so the `workbench`
package itself. Its public names are imported when first used (workbench/__init__.py), so
the rank does not load the launcher (the job, the core queue, the pool), the widgets, the
charts or the lessons, which it has no use for and which would tie the low layer to the
high one.
"""

from __future__ import annotations

import json
import subprocess
import sys

from workbench.jobs.engines import ENGINES

#: Every module a process of a job runs: the engines' rank modules and the others.
RANK_MODULES = sorted({e.rank_module for e in ENGINES.values() if e.rank_module} | {
    "workbench.jobs.user_rank", "workbench.jobs.pool_rank", "workbench.jobs.workers",
    "workbench.scaling.allreduce_rank", "workbench.synchronization.ring_rank"})

#: What no rank may load (a name, or a package and everything under it).
LAUNCHER_AND_UI = ["workbench.jobs.job", "workbench.jobs.starting", "workbench.jobs.ending",
                   "workbench.jobs.pool", "workbench.jobs.cores",
                   "workbench.jobs.watch", "workbench.jobs.slurm", "workbench.cli",
                   "workbench.ui", "workbench.lessons", "workbench.exercises", "bokeh",
                   "ipywidgets", "IPython"]

PROBE = """
import importlib, json, sys
forbidden = json.loads(sys.argv[1])
out, seen = {}, set()
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
    out[name] = sorted(m for m in set(sys.modules) - seen
                       if any(m == f or m.startswith(f + ".") for f in forbidden))
    seen.update(out[name])
print(json.dumps(out))
"""


def test_no_rank_module_loads_the_launcher_or_the_ui():
    """One interpreter imports them all, in turn: a forbidden module is named beside the
    rank module that loaded it first."""
    assert len(RANK_MODULES) >= 12, RANK_MODULES
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(LAUNCHER_AND_UI),
                           json.dumps(RANK_MODULES)], capture_output=True, text=True,
                          timeout=120, check=True)
    assert json.loads(proc.stdout) == {name: [] for name in RANK_MODULES}


def test_the_public_names_are_all_there_when_asked_for():
    import workbench
    import workbench.jobs

    for package in (workbench, workbench.jobs):
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"
    assert workbench.start is workbench.jobs.start
    assert "report" in dir(workbench)

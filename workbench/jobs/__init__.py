"""Jobs: launching one, watching it, stopping it (see job.py and engines.py).

What the launchers already provide. `torchrun` and `horovodrun` start N processes, on this
host or on several (torchrun, one per host; horovodrun, over ssh), tell each its rank, the
world size and its local rank in environment variables, and run the rendezvous where the
ranks find each other (torchrun's TCP store, horovodrun's HTTP key-value store). When one
rank fails they end the others, and torchrun can restart the group (`--max-restarts`).
The rank modules use all of it, and run under either launcher alone (training/context.py).

What the workbench keeps on top, and why:

- **One record for every engine** (`runs/<run_id>/`, docs/ARCHITECTURE.md): the panels,
  `workbench show` and the scaling lab read a Horovod run, a DDP run and a serial run the
  same way. The launchers leave only their terminal output, each in its own format.
- **horovodrun's per-rank sessions**: it starts every rank in a session of its own, so
  ending horovodrun, or its process group, can leave ranks behind. Each rank writes its
  pid and host, and a job ends them one by one (processes.py).
- **Owner watchdog and guard, across hosts**: neither launcher knows that the notebook
  kernel which started a job has died. The ranks leave when their owner's heartbeat says
  so or stops (training/rank_protocol.py), and a guard process ends the launcher (guard.py).
- Sharing this host's cores between jobs (cores.py), and a failure report that names the
  rank that failed first, with its traceback, not the ranks that failed in its wake.

The package is called `jobs`, not `launch`, so that `workbench.launch(fn)` can be the call
that runs a user's own function on real ranks.

Lessons it serves: notebooks/00_welcome.ipynb (start, launch, warm ranks) and every lesson
that runs a job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench import lazy_names

if TYPE_CHECKING:
    from workbench.engines import ENGINES, Engine
    from workbench.jobs.job import FINAL_STATES, Job, stop_all
    from workbench.jobs.starting import apply_preset, start, start_module

#: Imported when first used, as in workbench/__init__.py: a rank that needs one of these
#: modules (the rank protocol, the engines' table) does not load the launcher.
_WHERE = {"ENGINES": "workbench.engines", "Engine": "workbench.engines",
          **dict.fromkeys(["FINAL_STATES", "Job", "stop_all"], "workbench.jobs.job"),
          **dict.fromkeys(["apply_preset", "start", "start_module"], "workbench.jobs.starting")}
__all__ = ["ENGINES", "FINAL_STATES", "Engine", "Job", "apply_preset", "start", "start_module",
           "stop_all"]


__getattr__ = lazy_names(globals(), _WHERE)

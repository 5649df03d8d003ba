"""The launcher's side: what runs in the notebook or the CLI (the rank's side: rank/).

`start(cfg)`, `start_module(...)` and `launch(fn)` (starting.py) make a `Job` (job.py),
handed its launcher (launchers.py, slurm.py, pool_call.py) and its ticket for this host's
cores (cores.py); it watches its ranks (watch.py) and ends them. `ranks()`: pool.py.
The package is also the function `launch` (`workbench.launch(fn, np=2)`: user_code.py).
Why it is built so: docs/ARCHITECTURE.md, "The machinery".
Lessons it serves: notebooks/02_data_parallelism_horovod.ipynb and every lesson that starts a job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench import callable_package, lazy_names

if TYPE_CHECKING:
    from workbench.engines import ENGINES, Engine
    from workbench.launch.job import FINAL_STATES, Job, stop_all
    from workbench.launch.starting import apply_preset, start, start_module

#: Imported when first used, as in workbench/__init__.py: importing one module of launch/
#: (the core queue, say) does not load the job and its launchers.
_WHERE = {"ENGINES": "workbench.engines", "Engine": "workbench.engines",
          **dict.fromkeys(["FINAL_STATES", "Job", "stop_all"], "workbench.launch.job"),
          **dict.fromkeys(["apply_preset", "start", "start_module"], "workbench.launch.starting")}
__all__ = ["ENGINES", "FINAL_STATES", "Engine", "Job", "apply_preset", "start", "start_module",
           "stop_all"]


__getattr__ = lazy_names(globals(), _WHERE)

callable_package(__name__, "workbench.launch.user_code")

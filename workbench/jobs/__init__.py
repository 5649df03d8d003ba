"""Jobs: launching one, watching it, stopping it (see job.py and engines.py).

The package is called `jobs`, not `launch`, so that `workbench.launch(fn)` can be the call
that runs a user's own function on real ranks.
"""

from workbench.jobs.engines import ENGINES, Engine
from workbench.jobs.job import FINAL_STATES, Job, apply_preset, start, start_module, stop_all

__all__ = ["ENGINES", "FINAL_STATES", "Engine", "Job", "apply_preset", "start", "start_module",
           "stop_all"]

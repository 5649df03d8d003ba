"""The launcher's side: what runs in the notebook or the CLI (the rank's side: rank/).

`start(cfg)`, `start_module(...)` and `launch(fn)` (the package is also that function) make
a `Job`, handed its launcher and its ticket for cores; they are imported when first used, so
that the core queue, say, loads without the job. Why: docs/ARCHITECTURE.md, "The machinery".
Lessons it serves: notebooks/02_data_parallelism_horovod.ipynb and every lesson that starts a job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench import callable_package, lazy_names

if TYPE_CHECKING:
    from workbench.launch.job import FINAL_STATES, Job
    from workbench.launch.starting import start, start_module

_WHERE = {**dict.fromkeys(["FINAL_STATES", "Job"], "workbench.launch.job"),
          **dict.fromkeys(["start", "start_module"], "workbench.launch.starting")}
__all__ = ["FINAL_STATES", "Job", "start", "start_module"]


__getattr__ = lazy_names(globals(), _WHERE)

callable_package(__name__, "workbench.launch.starting")

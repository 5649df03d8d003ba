"""workbench: run and study distributed deep-learning jobs from Jupyter.

    import workbench
    job = workbench.start(workbench.JobConfig(engine="horovod", np=2, epochs=3))
    job.wait(); job.summary
"""

from workbench.config import ConfigError, JobConfig
from workbench.jobs import Job, start, start_module
from workbench.records import RunRecord, list_runs, load_run

__version__ = "0.1.0"
__all__ = ["ConfigError", "Job", "JobConfig", "RunRecord", "list_runs", "load_run", "start",
           "start_module", "__version__"]

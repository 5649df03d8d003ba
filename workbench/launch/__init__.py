"""Launching a job and looking after its processes (see job.py and engines.py)."""

from workbench.launch.engines import ENGINES, Engine
from workbench.launch.job import FINAL_STATES, Job, apply_preset, start, start_module, stop_all

__all__ = ["ENGINES", "FINAL_STATES", "Engine", "Job", "apply_preset", "start", "start_module",
           "stop_all"]

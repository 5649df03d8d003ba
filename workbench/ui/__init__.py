"""The widgets of the workbench: one chart helper and the live panels.

``charts`` builds every Bokeh chart; ``TrainingPanel`` starts and watches one job;
``ScalingPanel`` runs a scaling sweep and plots speedup, efficiency and scalability;
``RunPanel`` watches a job started from code (``workbench.launch(fn)``, ``start(cfg)``).
The panels are imported on first use, so ``from workbench.ui import charts`` stays light.

Lessons it serves: notebooks/02_data_parallelism_horovod.ipynb (the training panel) and
notebooks/06_speedup_efficiency_scalability.ipynb (the scaling panel).
"""

from __future__ import annotations

from typing import Any

__all__ = ["RunPanel", "TrainingPanel", "ScalingPanel"]


def __getattr__(name: str) -> Any:
    if name == "TrainingPanel":
        from workbench.ui.training_panel import TrainingPanel

        return TrainingPanel
    if name == "RunPanel":
        from workbench.ui.run_panel import RunPanel

        return RunPanel
    if name == "ScalingPanel":
        from workbench.ui.scaling_panel import ScalingPanel

        return ScalingPanel
    raise AttributeError(f"module 'workbench.ui' has no attribute {name!r}")

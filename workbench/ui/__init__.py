"""The widgets of the workbench: one chart helper and the live panels.

``charts`` builds every Bokeh chart; ``TrainingPanel`` starts and watches one job;
``ScalingPanel`` runs a scaling sweep and plots speedup, efficiency and scalability;
``RunPanel`` watches a job started from code (``workbench.launch(fn)``, ``start(cfg)``).
The panels are imported on first use, so ``from workbench.ui import charts`` stays light.

The lessons' pictures (`*_picture.py`) draw a concept's model with sliders: the ring
all-reduce, what each device holds, pipeline schedules, ZeRO's memory, Megatron's MLP,
Horovod's negotiation.

Lessons it serves: notebooks/02_data_parallelism_horovod.ipynb (the training panel),
notebooks/06_speedup_efficiency_scalability.ipynb (the scaling panel), and the pictures of
notebooks/04_collectives.ipynb, notebooks/05_types_of_parallelism.ipynb,
notebooks/07_sharded_data_parallelism.ipynb and
notebooks/08_tensor_parallelism_buckets_accumulation.ipynb.
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

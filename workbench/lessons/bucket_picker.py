"""Notebook 08's bucket-size widget: pick a size, run the bucketed and overlapped engines.

    from workbench.lessons.bucket_picker import BucketPicker
    BucketPicker(SAME)          # SAME: the comparison's JobConfig fields, bucket_mb included

DDP's default is 25 MiB a bucket, its first 1 MiB (`bucket_cap_mb`). Smaller buckets start
their all-reduce sooner but send more, smaller messages; larger ones the reverse. At the
slider's smallest size nearly every gradient is a bucket of its own, at its largest the
whole lesson model is one bucket (workbench/data_parallel/buckets.py).

The two runs take warm ranks (`workbench.ranks`): the notebook's, when they are still open,
else a pool the picker opens for them and closes after, so that a press after the notebook
has closed its own still takes one start of the ranks instead of one per run, and leaves no
ranks holding cores.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
from IPython.display import display

import workbench
from workbench.launch.pool_call import running_pool
from workbench.lessons.runs import SPLIT_COLUMNS, step_split
from workbench.lessons.show import table

ENGINES = ("bucketed", "overlapped")


class BucketPicker(widgets.VBox):
    """A log-scale slider of bucket sizes (MiB), a Run button, and the table of the runs."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields
        self.size = widgets.FloatLogSlider(value=fields.get("bucket_mb", 1.0), base=2, min=-8,
                                           max=2, step=1, description="bucket (MiB)",
                                           style={"description_width": "initial"})
        self.button = widgets.Button(description="Run bucketed and overlapped",
                                     layout=widgets.Layout(width="auto"))
        self.shown = widgets.Output()
        self.jobs: list[workbench.Job] = []     # the last runs, and their rows
        self.rows: list[dict[str, Any]] = []
        self.button.on_click(lambda _: self.run())
        super().__init__([widgets.HBox([self.size, self.button]), self.shown])

    def run(self) -> list[dict[str, Any]]:
        """Run each engine with the picked bucket size, one after the other (they would
        share cores), saying what runs as it starts; show and return their rows
        (`step_split`, ms per step)."""
        np, runs_dir = self.fields["np"], self.fields.get("runs_dir", "runs")
        mine = running_pool("torch", np, runs_dir) is None
        self.shown.clear_output()
        if mine:    # a start of ranks takes seconds: say so before it, not after
            self.shown.append_stdout(f"starting {np} warm ranks ...\n")
        pool = workbench.ranks(np=np, engine="torch", runs_dir=runs_dir,
                               cpu_bind=self.fields.get("cpu_bind", "core"))
        self.jobs = []
        try:
            for engine in ENGINES:
                self.shown.append_stdout(f"{engine}, buckets of {self.size.value:g} MiB, "
                                         f"on {np} warm ranks ...\n")
                job = workbench.start(workbench.JobConfig(
                    **{**self.fields, "engine": engine, "bucket_mb": self.size.value}))
                assert job.wait(timeout=400) == "succeeded", job.summary
                self.jobs.append(job)
        finally:
            if mine:
                pool.close()   # the picker's own ranks: they would hold cores
        self.rows = [step_split(job) for job in self.jobs]
        with self.shown:
            self.shown.clear_output()
            display(table(self.rows, SPLIT_COLUMNS,
                          caption=f"bucketed and overlapped, buckets of {self.size.value:g} MiB"))
        return self.rows

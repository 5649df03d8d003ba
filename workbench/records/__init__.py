"""The durable record of every run: `runs/<run_id>/` (docs/ARCHITECTURE.md, "The record of
a run"). Lessons it serves: notebooks/03_synchronization.ipynb (a failed run's record, its
checkpoints) and every lesson that reads a run."""

from workbench.records.metrics import MetricsReader, events, metrics_path, of_kind, overall_by_step
from workbench.records.runs import RunRecord, list_runs, load_run, record_of
from workbench.records.store import new_run_dir, read_json, write_json_atomic

__all__ = ["MetricsReader", "RunRecord", "events", "list_runs", "load_run", "metrics_path",
           "new_run_dir", "of_kind", "overall_by_step", "read_json", "record_of",
           "write_json_atomic"]

"""The durable record of every run: `runs/<run_id>/` (see docs/ARCHITECTURE.md).

Lessons it serves: notebooks/03_synchronization.ipynb (a failed run's record, its
checkpoints) and every lesson that reads a run.
"""

from workbench.records.metrics import (
    MetricsReader,
    events,
    metrics_path,
    of_kind,
    overall_by_step,
    step_start,
    throughput,
)
from workbench.records.runs import RunRecord, list_runs, load_run, record_of
from workbench.records.store import (
    CorruptRecord,
    new_run_dir,
    read_json,
    write_all,
    write_json_atomic,
)

__all__ = ["CorruptRecord", "MetricsReader", "RunRecord", "events", "list_runs", "load_run",
           "metrics_path", "new_run_dir", "of_kind", "overall_by_step", "read_json", "record_of",
           "step_start", "throughput", "write_all", "write_json_atomic"]

"""The durable record of every run: `runs/<run_id>/` (see docs/ARCHITECTURE.md)."""

from workbench.records.metrics import MetricsReader, events, of_kind, overall_by_step, throughput
from workbench.records.runs import RunRecord, list_runs, load_run
from workbench.records.store import new_run_dir, read_json, write_json_atomic

__all__ = ["MetricsReader", "RunRecord", "events", "list_runs", "load_run", "new_run_dir",
           "of_kind", "overall_by_step", "read_json", "throughput", "write_json_atomic"]

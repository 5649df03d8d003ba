"""The training panel's parts that are not the panel: its controls (one widget per
`JobConfig` field it shows) and what it says of a run in words (training_panel.py).
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from workbench.config import DATASETS, DEVICES, ENGINES, MODELS, OPTIMIZERS
from workbench.launch import devices, slurm
from workbench.ui import live

#: The JobConfig fields the panel shows, in order, with their label and widget kind.
CONTROL_SPECS: list[tuple[str, str, Any]] = [
    ("engine", "engine", ENGINES),
    ("np", "ranks (np)", int),
    ("model", "model", MODELS),
    ("dataset", "dataset", DATASETS),
    ("epochs", "epochs", int),
    ("batch_size", "batch/rank", int),
    ("accumulate", "micro-batches", int),   # gradient accumulation: k per step
    ("bucket_mb", "bucket (MiB)", float),   # the bucketed and overlapped engines
    ("lr", "learning rate", float),
    ("optimizer", "optimizer", OPTIMIZERS),
    ("seed", "seed", int),
    ("threads_per_rank", "threads/rank", int),
]


def control_specs(launcher: str = "local") -> list[tuple[str, str, Any]]:
    """CONTROL_SPECS, with a launcher choice where Slurm's `sbatch` is here to submit to,
    and a device choice where CUDA exists (elsewhere "local" and "cpu" are the only
    choices, and a control for them would only distract)."""
    specs = list(CONTROL_SPECS)
    if slurm.available() is None:
        choices = tuple(dict.fromkeys(("local", "slurm", launcher)))
        specs = [*specs[:2], ("launcher", "launcher", choices), *specs[2:]]
    if devices.gpu_count() > 0:
        specs.append(("device", "device", DEVICES))
    return specs


def make_control(name: str, label: str, kind: Any, value: Any) -> widgets.Widget:
    """One input widget. Numbers use plain text boxes, not bounded ones, so that a bad value
    reaches ``JobConfig.validate()`` and the student sees *why* it is refused."""
    style = {"description_width": "104px"}   # room for the longest label, "micro-batches"
    layout = widgets.Layout(width="198px")
    if isinstance(kind, tuple):
        return widgets.Dropdown(options=list(kind), value=value, description=label,
                                style=style, layout=layout)
    cls = {int: widgets.IntText, float: widgets.FloatText}[kind]
    return cls(value=value, description=label, style=style, layout=layout)


def summary_text(summary: dict) -> str:
    """One line with the outcome of a finished run (fields of summary.json)."""
    parts = []
    if summary.get("duration_s") is not None:
        parts.append(f"took {live.fmt_seconds(float(summary['duration_s']))}")
    if summary.get("startup_s") is not None and summary.get("train_time_s") is not None:
        # launching ranks and importing torch often costs more than training a small model
        parts.append(f"start-up {live.fmt_seconds(float(summary['startup_s']))}, "
                     f"training {live.fmt_seconds(float(summary['train_time_s']))}")
    loss = summary.get("final_loss", summary.get("last_epoch_loss"))
    acc = summary.get("final_accuracy", summary.get("last_epoch_accuracy"))
    if loss is not None:
        parts.append(f"final loss {float(loss):.3f}")
    if acc is not None:
        parts.append(f"accuracy {float(acc):.2f}")
    if summary.get("samples_per_s"):
        parts.append(f"{float(summary['samples_per_s']):,.0f} samples/s")
    return " · ".join(parts)


def failure_text(summary: dict) -> str:
    """The failed rank, its error and the last lines of its log (summary.json's failure)."""
    failure = summary.get("failure") or {}
    if not failure:
        return "No failure details were recorded (see the logs below)."
    rank = failure.get("rank")
    who = f"rank {rank}" if rank is not None else "the launcher"
    lines = [f"{who}: {failure.get('error') or 'failed'}"]
    log = failure.get("log_tail") or ""
    if isinstance(log, list):
        log = "\n".join(log)
    traceback = (failure.get("traceback") or "").rstrip()
    if traceback and traceback not in log:  # too long for the log's last lines: show it all
        lines += ["", traceback]
    if log:
        lines += ["", f"last lines of the log of {who}:", log]
    return "\n".join(lines)


def what_ran(config: dict) -> str:
    """What a run ran, from its record's config: the function or script that
    `workbench.launch` sent (whose config's training fields are defaults it never used),
    else the workbench's training: model, dataset and batch per rank."""
    ran = config.get("extra") or {}
    if ran.get("function"):
        return f"{ran['function'].rsplit('.', 1)[-1]}()"
    if ran.get("script"):
        return ran["script"].rsplit("/", 1)[-1]
    return (f"{config.get('model', '?')} on {config.get('dataset', '?')}, "
            f"batch {config.get('batch_size', '?')}/rank")


def run_label(record: Any) -> str:
    """A past run as one line of the picker: id (its time, name or engine, and ranks),
    status, what it ran."""
    return f"{record.run_id} — {record.status} — {what_ran(record.config)}"

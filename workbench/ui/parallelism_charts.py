"""The charts of the parallelism lessons: what a pipeline's stages do over time and where
its bubble is, the memory of data against model parallelism (notebook 05), and what each
rank of a sharded run holds (notebook 07). What they draw is computed in the concept's own
package (model_parallel/, sharded/); this module only makes the Bokeh figures.
"""

from __future__ import annotations

from typing import Any

from workbench.records import record_of
from workbench.sharded.measured import footprint_rows
from workbench.ui import charts


def pipeline_figure(result: dict[str, Any]):
    """A Bokeh Gantt chart of a run: who computes what, when, and where the bubble is."""
    title = (f"{result['schedule']} pipeline, P={result['stages']}, "
             f"M={result['microbatches']}: bubble {result['measured_bubble']:.2f} measured, "
             f"{result['theoretical_bubble']:.2f} in theory")
    lanes = [f"stage {k}" for k in range(result["stages"])]
    fig, _ = charts.gantt(gantt_tasks(result), title, y_label="pipeline stage", lanes=lanes)
    return fig


def memory_figure(result: dict[str, Any]):
    """Stacked bars: bytes per worker (parameters, gradients, optimizer, activations)."""
    parts = ["params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes"]
    strategies = {"data parallel": result["data_parallel"]["memory_per_worker"],
                  "model parallel": result["model_parallel"]["memory_per_worker"]}
    stacks = {p.removesuffix("_bytes"): [m[p] / 2**20 for m in strategies.values()]
              for p in parts}
    fig, _ = charts.stacked_bar(list(strategies), stacks, "Memory per worker",
                                x_label="parallelism", y_label="MiB")
    return fig


def held_chart(runs: list[Any]):
    """A stacked bar per run: what its rank 0 holds, in MB (the project's chart helper)."""
    rows = [footprint_rows(run)[0] for run in runs]
    names = [f"{r['engine']} np={record_of(run).config['np']}" for r, run in
             zip(rows, runs, strict=True)]
    fig, _ = charts.stacked_bar(
        names, {"parameters": [r["param_bytes"] for r in rows],
                "gradients": [r["grad_bytes"] for r in rows],
                "optimizer state": [r["optimizer_bytes"] for r in rows]},
        "bytes held by rank 0", x_label="engine and ranks of the run", y_label="MB")
    return fig


def gantt_tasks(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Tasks for :func:`workbench.ui.charts.gantt`: every pass, plus the idle gaps (bubble)."""
    tasks = []
    by_stage: dict[int, list[dict]] = {}
    for e in result["events"]:
        by_stage.setdefault(e["stage"], []).append(e)
        kind = "forward" if e["kind"] == "fwd" else "backward"
        tasks.append({"lane": f"stage {e['stage']}", "start": e["start"], "end": e["end"],
                      "kind": kind, "label": f"{kind} of micro-batch {e['microbatch']} "
                                             f"(step {e['step']})"})
    for stage, events in by_stage.items():
        for step in sorted({e["step"] for e in events}):
            mine = [e for e in events if e["step"] == step]
            everyone = [e for e in result["events"] if e["step"] == step]
            edges = [min(e["start"] for e in everyone)]
            for e in mine:
                edges += [e["start"], e["end"]]
            edges.append(max(e["end"] for e in everyone))
            for gap_start, gap_end in zip(edges[::2], edges[1::2], strict=True):
                if gap_end - gap_start > 1e-4:
                    tasks.append({"lane": f"stage {stage}", "start": gap_start,
                                  "end": gap_end, "kind": "idle",
                                  "label": f"idle (bubble), step {step}"})
    return tasks

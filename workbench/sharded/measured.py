"""A run's measured bytes per rank beside the cost model's prediction.

Reads the step lines of a finished (or running) job: their `param_bytes`, `grad_bytes`,
`optimizer_bytes` and `sent_bytes` (sharded/memory.py, sharded/traffic.py), and sets each
beside `costmodel.model_states` and `costmodel.sent_per_step` for the run's own Ψ, N, K
and precision.
"""

from __future__ import annotations

from math import prod
from typing import Any

from workbench.records import of_kind
from workbench.records import record_of as record
from workbench.sharded.costmodel import (
    STRATEGY_OF,
    fsdp2_shard,
    model_states,
    optimizer_bytes_per_parameter,
    sent_per_step,
)

FIELDS = ("param_bytes", "grad_bytes", "optimizer_bytes", "sent_bytes")


def last_footprint(run: Any) -> dict[int, dict[str, int]]:
    """{rank: the byte fields of its last step line} (ranks that reported them)."""
    out: dict[int, dict[str, int]] = {}
    for line in of_kind(record(run).metrics(), "step"):
        if "param_bytes" in line:
            out[line["rank"]] = {f: line[f] for f in FIELDS}
    return out


def parameter_count(run: Any) -> int:
    """Ψ: the number of parameters of the run's final model."""
    return sum(int(v.numel()) for v in record(run).model_state().values())


def predicted(run: Any, rank: int = 0) -> dict[str, float]:
    """The cost model's bytes for rank `rank` of this run (fp32 parameters and gradients).

    For FSDP (ZeRO-3) Ψ is what FSDP2 gives the rank (`costmodel.fsdp2_shard`): each
    parameter is cut on its dim 0, so ranks differ when a dim 0 does not divide by N.
    """
    rec = record(run)
    return _predicted(rec.config, parameter_shapes(rec), rank)


def parameter_shapes(run: Any) -> list[tuple[int, ...]]:
    """The shape of each tensor of the run's final model (read once from its model.pt)."""
    return [tuple(v.shape) for v in record(run).model_state().values()]


def _predicted(cfg: dict[str, Any], shapes: list[tuple[int, ...]], rank: int,
               ) -> dict[str, float]:
    strategy = STRATEGY_OF[cfg["engine"]]
    n = int(cfg["np"])
    psi = held = sum(prod(shape) for shape in shapes)
    if strategy == "zero3":
        padded, own = fsdp2_shard(shapes, n, rank)
        psi, held = padded * n, own * n
    value = {"float32": 4, "float64": 8}[cfg.get("dtype", "float32")]
    k = optimizer_bytes_per_parameter(cfg["optimizer"], cfg["momentum"]) * value // 4
    states = model_states(psi, n, strategy, k, value)
    wire = 2 if cfg.get("grad_compression") == "bf16" else value  # bytes per gradient sent
    return {"param_bytes": states.params, "grad_bytes": states.grads,
            "optimizer_bytes": model_states(held, n, strategy, k, value).optimizer,
            "sent_bytes": sent_per_step(psi, n, strategy, value, wire)}


def comparison(run: Any) -> list[dict[str, Any]]:
    """One row per rank and field: {"rank", "field", "measured", "predicted", "ratio"}."""
    rec = record(run)
    shapes, rows = parameter_shapes(rec), []
    for rank, fields in sorted(last_footprint(rec).items()):
        model = _predicted(rec.config, shapes, rank)
        for name in FIELDS:
            want, got = model[name], fields[name]
            rows.append({"rank": rank, "field": name, "measured": got, "predicted": want,
                         "ratio": got / want if want else (1.0 if got == 0 else float("inf"))})
    return rows


def footprint_rows(run: Any) -> list[dict[str, Any]]:
    """One row per rank, in MB: what it holds, the model's total, and what it sent per step
    beside the model's figure (for `workbench.lessons.show.table`)."""
    rec = record(run)
    shapes, rows = parameter_shapes(rec), []
    for rank, got in sorted(last_footprint(rec).items()):
        model = _predicted(rec.config, shapes, rank)
        held = got["param_bytes"] + got["grad_bytes"] + got["optimizer_bytes"]
        rows.append({"engine": rec.config["engine"], "rank": rank,
                     **{f: got[f] / 1e6 for f in FIELDS}, "held": held / 1e6,
                     "held_model": (model["param_bytes"] + model["grad_bytes"]
                                    + model["optimizer_bytes"]) / 1e6,
                     "sent_model": model["sent_bytes"] / 1e6})
    return rows


#: The columns of `footprint_rows` for `workbench.lessons.show.table`.
COLUMNS = [("engine", "engine", "s"), ("rank", "rank", "d"),
           ("param_bytes", "params (MB)", ".3f"), ("grad_bytes", "grads (MB)", ".3f"),
           ("optimizer_bytes", "optimizer (MB)", ".3f"), ("held", "held (MB)", ".3f"),
           ("held_model", "held, cost model (MB)", ".3f"),
           ("sent_bytes", "sent/step (MB)", ".3f"),
           ("sent_model", "sent/step, cost model (MB)", ".3f")]

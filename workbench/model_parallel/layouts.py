"""What each of N devices holds, computes on and sends under data, tensor, pipeline and
sharded data parallelism, for an MLP of L square layers of width h and a batch of B
samples (notebook 05's picture, `ui/layout_picture.py`).

- **data**: every device holds every layer whole and computes on 1/N of the batch; the
  gradients are all-reduced (Patarasuk & Yuan 2009: 2(N−1)/N of them sent per device).
- **tensor** (Megatron-LM, Shoeybi et al. 2019): every layer is split, the first of each
  pair by columns, the second by rows; every device computes on the whole batch, and each
  pair all-reduces its output forward and its input's gradient backward
  (`tensor_parallel/traffic.py`).
- **pipeline** (GPipe, Huang et al. 2019): device k holds a contiguous run of layers
  (`pipeline.stage_slice`), sees every sample, and sends the activations at its cut forward
  and their gradients backward.
- **sharded** (ZeRO-3, Rajbhandari et al. 2020; FSDP): every device keeps 1/N of every layer
  and computes on 1/N of the batch, gathering each layer whole just before using it
  (`sharded/costmodel.py`: 3(N−1)/N of the parameters sent per device).
"""

from __future__ import annotations

from typing import Any

from workbench.model_parallel.pipeline import stage_slice
from workbench.sharded import costmodel
from workbench.tensor_parallel import traffic

STRATEGIES = ("data", "tensor", "pipeline", "sharded")
VALUE_BYTES = 4     # float32


def holdings(strategy: str, devices: int, layers: int) -> list[dict[str, Any]]:
    """One row per (device, layer): ``share`` of that layer's weights the device keeps
    between steps, and ``part``: "whole", "columns", "rows", "1/N slice" or "none"."""
    _check(strategy, devices, layers)
    rows = []
    for device in range(devices):
        mine = stage_slice(layers, devices, device)
        for layer in range(layers):
            if strategy == "data":
                part = "whole"
            elif strategy == "tensor":
                part = "columns" if layer % 2 == 0 else "rows"
            elif strategy == "pipeline":
                part = "whole" if mine.start <= layer < mine.stop else "none"
            else:
                part = "1/N slice"
            share = {"whole": 1.0, "none": 0.0}.get(part, 1 / devices)
            rows.append({"device": device, "layer": layer, "part": part, "share": share})
    return rows


def samples_seen(strategy: str, devices: int, batch: int) -> list[list[int]]:
    """The samples of one batch each device computes on: its 1/N under data and sharded
    parallelism (`training/sharding.py`'s contiguous slices), all of them otherwise."""
    _check(strategy, devices, devices)
    if strategy in ("data", "sharded"):
        size = batch // devices
        return [list(range(d * size, (d + 1) * size)) for d in range(devices)]
    return [list(range(batch)) for _ in range(devices)]


def sent_per_step(strategy: str, devices: int, width: int, layers: int, batch: int) -> float:
    """Bytes the busiest device sends per training step (float32, biases left out)."""
    _check(strategy, devices, layers)
    psi = layers * width * width
    if strategy == "data":
        return costmodel.sent_per_step(psi, devices, "ddp", VALUE_BYTES)
    if strategy == "sharded":
        return costmodel.sent_per_step(psi, devices, "zero3", VALUE_BYTES)
    if strategy == "pipeline":
        return pipeline_bytes(devices, batch, width)
    payload = traffic.step_bytes(layers // 2, batch, width, VALUE_BYTES)
    return 2 * (devices - 1) / devices * payload     # each all-reduce on a ring


def pipeline_bytes(stages: int, batch: int, width: int) -> float:
    """Bytes the busiest stage sends per step: the activations at its cut forward and their
    gradients backward, batch × width values each; a middle stage sends both ways."""
    return (1 if stages == 2 else 2) * batch * width * VALUE_BYTES


def _check(strategy: str, devices: int, layers: int) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: expected one of "
                         f"{', '.join(STRATEGIES)}")
    if devices < 2 or layers < devices:
        raise ValueError(f"need 2 or more devices and at least as many layers, got "
                         f"{devices} devices and {layers} layers")

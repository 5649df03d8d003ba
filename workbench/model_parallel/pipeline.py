"""Pipeline model parallelism: an MLP's layers split over P processes, trained for real.

Stage k (process k) holds a contiguous slice of the layers. Each training step cuts the
mini-batch into M **micro-batches**. Stage k receives a micro-batch's activations from stage
k−1, runs its layers, and sends the result to stage k+1; in the backward pass the gradient
with respect to those activations travels the other way. Messages are real
``torch.distributed`` send/recv over gloo between processes.

Why micro-batches: with one batch, stage 1 waits while stage 0 computes, and stage 0 waits
while stage 1 does — each process is idle most of the time. Micro-batches let the stages
work on different micro-batches at once. What is left idle is the **bubble**: for P stages
and M micro-batches of equal cost it is the fraction (P−1)/(M+P−1) of each stage's time
(GPipe: Huang et al., "GPipe: Efficient Training of Giant Neural Networks using Pipeline
Parallelism", NeurIPS 2019): still (P−1)/(5P−1) at M = 4P, 11% for P = 2 and towards 20%.

Two schedules, with the same bubble:

* ``gpipe``: all M forwards, then all M backwards. Each stage keeps the activations of all M
  micro-batches until their backward.
* ``1f1b``: after a short warm-up of P−k−1 forwards, stage k alternates one forward and one
  backward (PipeDream-Flush: Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN
  Training", ICML 2021). At most P−k micro-batches are in flight, not M, so far less
  activation memory — the lab measures both.

Gradients of all micro-batches are accumulated before one optimizer step per stage, so the
pipelined model computes exactly the same update as the unsplit model on the whole batch
(:func:`train_unsplit` is that reference; the results agree to float rounding).

**Making the timing teachable (``compute_ms``).** The bubble formula assumes every
micro-batch costs the same on every stage and that messages are free. On a shared 2-core
laptop neither holds for a tiny MLP: a forward pass takes well under a millisecond, about
what one local send/recv costs, and two stages computing at once compete for the cores with
whatever else runs. So by default each forward pass is *padded* to ``compute_ms``
milliseconds and each backward to twice that (a backward pass computes gradients with
respect to both inputs and weights, about twice a forward's work): the stage really
computes, then sleeps until the budget is used up. This models an accelerator with a fixed
speed per stage; a sleeping process leaves the core free, so the timings no longer depend
on how busy the machine is, and the message cost (≈0.1–1 ms) is small next to 20 ms of
"compute". Pass ``compute_ms=0`` to time the bare computation instead (raise ``width`` to
make it heavy) and see how far reality is from the formula.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from workbench.launch.workers import run_workers
from workbench.model_parallel.memory import ActivationMeter, memory_breakdown
from workbench.model_parallel.schedule import schedule_ops, theoretical_bubble

SCHEDULES = ("gpipe", "1f1b")
OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class PipelineConfig:
    """Settings of one pipeline run (see :func:`run_pipeline`)."""

    stages: int = 2
    microbatches: int = 4
    schedule: str = "gpipe"
    steps: int = 3
    batch_size: int = 64
    width: int = 128
    layers: int = 4
    lr: float = 0.1
    optimizer: str = "sgd"
    compute_ms: float = 20.0
    seed: int = 0

    def validate(self) -> PipelineConfig:
        """Raise ValueError naming the bad setting and how to fix it; return self."""
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, "
                             f"got {self.schedule!r}")
        if self.stages < 1:
            raise ValueError(f"stages must be at least 1, got {self.stages}")
        if self.layers < self.stages:
            raise ValueError(f"{self.stages} stages need at least as many layers; "
                             f"got layers={self.layers}: raise layers or lower stages")
        if not 1 <= self.microbatches <= self.batch_size:
            raise ValueError(f"microbatches must be between 1 and batch_size "
                             f"({self.batch_size}), got {self.microbatches}")
        if self.steps < 1 or self.width < 1:
            raise ValueError("steps and width must be at least 1")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, "
                             f"got {self.optimizer!r}")
        if self.compute_ms < 0:
            raise ValueError(f"compute_ms must be ≥ 0 milliseconds, got {self.compute_ms}")
        return self


# --- the model and its split ---------------------------------------------------------------

def make_blocks(in_features: int, width: int, layers: int, n_classes: int,
                seed: int) -> list[nn.Module]:
    """The MLP as a list of blocks (Linear + ReLU, the last one Linear only), seeded.

    Every process builds all blocks from the same seed and keeps its own slice, so the split
    model starts from exactly the weights of the unsplit one.
    """
    torch.manual_seed(seed)
    sizes = [in_features] + [width] * (layers - 1) + [n_classes]
    blocks: list[nn.Module] = []
    for i in range(layers):
        linear = nn.Linear(sizes[i], sizes[i + 1])
        blocks.append(linear if i == layers - 1 else nn.Sequential(linear, nn.ReLU()))
    return blocks


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """Plain SGD, or Adam (which keeps two extra tensors per parameter)."""
    return torch.optim.Adam(params, lr=lr) if name == "adam" else torch.optim.SGD(params, lr=lr)


def stage_slice(layers: int, stages: int, stage: int) -> slice:
    """Which blocks stage ``stage`` holds: a contiguous, as-equal-as-possible share."""
    return slice(stage * layers // stages, (stage + 1) * layers // stages)


def batches(n_samples: int, cfg: PipelineConfig) -> Iterator[torch.Tensor]:
    """Sample indices of each step's mini-batch: a seeded shuffle, cycled."""
    order = torch.randperm(n_samples, generator=torch.Generator().manual_seed(cfg.seed))
    for step in range(cfg.steps):
        start = (step * cfg.batch_size) % (n_samples - cfg.batch_size + 1)
        yield order[start:start + cfg.batch_size]


# --- one stage -----------------------------------------------------------------------------

class _Stage:
    """One pipeline stage: its layers, its messages, and a record of what it did when."""

    def __init__(self, rank: int, cfg: PipelineConfig, in_features: int, n_classes: int):
        self.rank, self.cfg = rank, cfg
        blocks = make_blocks(in_features, cfg.width, cfg.layers, n_classes, cfg.seed)
        self.layers = nn.Sequential(*blocks[stage_slice(cfg.layers, cfg.stages, rank)])
        self.optimizer = make_optimizer(cfg.optimizer, self.layers.parameters(), cfg.lr)
        self.activations = ActivationMeter(self.layers.parameters())
        self.first, self.last = rank == 0, rank == cfg.stages - 1
        self.in_width = in_features if self.first else cfg.width
        self.events: list[dict[str, Any]] = []
        self.pending: list[Any] = []              # isend handles not yet completed
        self.bytes_sent = 0
        self.peak_in_flight = 0
        self.step = 0

    def _compute(self, kind: str, mb: int, fn) -> Any:
        """Run ``fn`` as busy time, padded to the compute budget; record the event."""
        budget = self.cfg.compute_ms / 1000 * (2 if kind == "bwd" else 1)
        start = time.perf_counter()
        out = fn()
        remaining = budget - (time.perf_counter() - start)
        if remaining > 0:
            time.sleep(remaining)
        self.events.append({"stage": self.rank, "step": self.step, "microbatch": mb,
                            "kind": kind, "start": start, "end": time.perf_counter()})
        return out

    def _send(self, tensor: torch.Tensor, dst: int) -> None:
        """Send without waiting for the receiver, so this stage can go on computing."""
        tensor = tensor.contiguous()
        self.pending.append((dist.isend(tensor, dst), tensor))
        self.bytes_sent += tensor.numel() * tensor.element_size()

    def run_step(self, xs: list[torch.Tensor], ys: list[torch.Tensor], batch: int) -> float:
        """One training step over the micro-batches; returns the batch loss (last stage)."""
        saved: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}
        loss_total = 0.0
        self.optimizer.zero_grad()
        for kind, mb in schedule_ops(self.cfg.schedule, self.rank, self.cfg.stages, len(xs)):
            if kind == "fwd":
                inp = xs[mb] if self.first else self._recv((len(xs[mb]), self.in_width),
                                                           self.rank - 1)
                inp.requires_grad_(not self.first)
                with self.activations.recording() as n_saved:
                    out = self._compute("fwd", mb, lambda inp=inp, mb=mb: self._forward(
                        inp, ys[mb], len(xs[mb]) / batch))
                if self.last:
                    loss_total += out.item()
                else:
                    self._send(out.detach(), self.rank + 1)
                saved[mb] = (inp, out, n_saved[0])
                self.peak_in_flight = max(self.peak_in_flight, len(saved))
            else:
                inp, out, n_saved = saved.pop(mb)
                grad = None if self.last else self._recv(tuple(out.shape), self.rank + 1)
                self._compute("bwd", mb, lambda out=out, grad=grad: out.backward(grad))
                self.activations.release(n_saved)
                if not self.first:
                    self._send(inp.grad, self.rank - 1)
        for handle, _ in self.pending:
            handle.wait()
        self.pending.clear()
        self.optimizer.step()
        self.step += 1
        return loss_total

    def _forward(self, inp: torch.Tensor, y: torch.Tensor, share: float) -> torch.Tensor:
        """This stage's layers; the last stage also computes the loss.

        Each micro-batch's mean loss is weighted by its share of the batch, so the gradients
        accumulated over the micro-batches are those of the whole batch's mean loss.
        """
        out = self.layers(inp)
        if self.last:
            out = nn.functional.cross_entropy(out, y) * share
        return out

    @staticmethod
    def _recv(shape: tuple[int, ...], src: int) -> torch.Tensor:
        buf = torch.empty(shape)
        dist.recv(buf, src)
        return buf


def train_stage(rank: int, cfg: PipelineConfig, x: torch.Tensor, y: torch.Tensor,
                 n_classes: int) -> dict[str, Any]:
    """Stage ``rank`` trains ``cfg.steps`` steps; returns its timings and losses."""
    stage = _Stage(rank, cfg, x.shape[1], n_classes)
    losses, windows = [], []
    for idx in batches(len(x), cfg):
        xs = list(x[idx].tensor_split(cfg.microbatches))
        ys = list(y[idx].tensor_split(cfg.microbatches))
        dist.barrier()                 # all stages start the step together
        start = time.perf_counter()
        losses.append(stage.run_step(xs, ys, len(idx)))
        windows.append((start, time.perf_counter()))
    memory = memory_breakdown(stage.layers, stage.optimizer, stage.activations.peak)
    return {"stage": rank, "events": stage.events, "windows": windows, "losses": losses,
            "bytes_sent": stage.bytes_sent, "peak_in_flight": stage.peak_in_flight,
            "params": sum(p.numel() for p in stage.layers.parameters()), "memory": memory}


def _stage_process(rank: int, world: int, cfgs: list[PipelineConfig], x: torch.Tensor,
                   y: torch.Tensor, n_classes: int) -> list[dict[str, Any]]:
    """Entry point of process ``rank``: run one pipeline per config, in the same processes."""
    return [train_stage(rank, cfg, x, y, n_classes) for cfg in cfgs]


# --- measuring the bubble ------------------------------------------------------------------

def measure_bubble(stage_results: list[dict[str, Any]], skip_first: bool = True) -> dict:
    """Busy and idle seconds of every stage, and the measured bubble (idle share).

    For each step the window runs from the moment the stages started it together (after a
    barrier) to the end of the last computation on any stage. A stage is busy while it runs a
    forward or backward pass, idle otherwise (waiting for a message or for the step to end).
    The first step is skipped when there are more: it includes one-off set-up costs.
    """
    steps = len(stage_results[0]["windows"])
    measured = range(1, steps) if skip_first and steps > 1 else range(steps)
    busy = [0.0] * len(stage_results)
    span_total = 0.0
    for step in measured:
        start = min(r["windows"][step][0] for r in stage_results)
        end = max(e["end"] for r in stage_results for e in r["events"] if e["step"] == step)
        span_total += end - start
        for r in stage_results:
            busy[r["stage"]] += sum(e["end"] - e["start"] for e in r["events"]
                                    if e["step"] == step)
    per_stage = [{"stage": k, "busy_s": b, "idle_s": span_total - b,
                  "idle_share": 1 - b / span_total} for k, b in enumerate(busy)]
    idle = sum(s["idle_s"] for s in per_stage)
    return {"measured_bubble": idle / (span_total * len(stage_results)),
            "measured_steps": len(measured), "span_s": span_total, "per_stage": per_stage}


def run_pipeline(stages: int = 2, microbatches: int = 4, schedule: str = "gpipe", *,
                 steps: int = 3, batch_size: int = 64, width: int = 128, layers: int = 4,
                 lr: float = 0.1, optimizer: str = "sgd", compute_ms: float = 20.0,
                 seed: int = 0, runs_dir: str = "runs",
                 timeout: float = 180.0) -> dict[str, Any]:
    """Train the MLP on the digits with a P-stage pipeline; measure its bubble.

    Returns a dict with ``measured_bubble`` (idle share of the stages' time),
    ``theoretical_bubble`` ((P−1)/(M+P−1)), ``time_s`` (seconds for all steps), ``losses``
    (batch loss per step), ``per_stage`` (``busy_s``, ``idle_s``, ``idle_share``,
    ``bytes_sent``, ``peak_in_flight`` micro-batches of activations held, ``params``,
    ``memory``: bytes of parameters, gradients, optimizer state and peak activations),
    ``events`` (``stage, step, microbatch, kind, start, end``; seconds since the first step
    began) and the ``config``.
    """
    cfg = PipelineConfig(stages=stages, microbatches=microbatches, schedule=schedule,
                         steps=steps, batch_size=batch_size, width=width, layers=layers, lr=lr,
                         optimizer=optimizer, compute_ms=compute_ms, seed=seed)
    return run_pipelines([cfg], runs_dir=runs_dir, timeout=timeout)[0]


def bubble_sweep(stages: int = 2, microbatches: tuple[int, ...] = (1, 2, 4, 8),
                 schedule: str = "gpipe", *, runs_dir: str = "runs", timeout: float = 300.0,
                 **settings: Any) -> list[dict[str, Any]]:
    """Run one pipeline per micro-batch count M (same processes); one result each.

    ``settings`` are the other :class:`PipelineConfig` fields (``steps``, ``compute_ms``...).
    Plot ``measured_bubble`` against ``theoretical_bubble`` to see the formula hold.
    """
    cfgs = [PipelineConfig(stages=stages, microbatches=m, schedule=schedule, **settings)
            for m in microbatches]
    return run_pipelines(cfgs, runs_dir=runs_dir, timeout=timeout)


def run_pipelines(cfgs: list[PipelineConfig], runs_dir: str = "runs",
                  timeout: float = 180.0) -> list[dict[str, Any]]:
    """Run several pipeline configurations (same number of stages) in one set of processes.

    Starting processes costs seconds; training a few steps costs less, so a sweep reuses them.
    """
    if not cfgs:
        raise ValueError("give at least one PipelineConfig")
    for cfg in cfgs:
        cfg.validate()
    stages = cfgs[0].stages
    if any(cfg.stages != stages for cfg in cfgs):
        raise ValueError("every config of one run_pipelines call must have the same stages")
    from workbench.data import load_dataset

    data = load_dataset("digits")
    per_process = run_workers(_stage_process, stages, (cfgs, data.x, data.y, data.n_classes),
                              name="pipeline", runs_dir=runs_dir, timeout=timeout,
                              names=[f"stage {k}" for k in range(stages)],
                              settings={"configs": [asdict(cfg) for cfg in cfgs]})
    return [_summarise(cfg, [p[i] for p in per_process]) for i, cfg in enumerate(cfgs)]


def _summarise(cfg: PipelineConfig, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge the stages' records of one run into the report of :func:`run_pipeline`."""
    t0 = min(r["windows"][0][0] for r in results)
    bubble = measure_bubble(results)
    for s, r in zip(bubble["per_stage"], results, strict=True):
        s.update(bytes_sent=r["bytes_sent"], peak_in_flight=r["peak_in_flight"],
                 params=r["params"], memory=r["memory"])
    events = sorted(({**e, "start": e["start"] - t0, "end": e["end"] - t0}
                     for r in results for e in r["events"]), key=lambda e: e["start"])
    return {"stages": cfg.stages, "microbatches": cfg.microbatches, "schedule": cfg.schedule,
            "measured_bubble": bubble["measured_bubble"],
            "theoretical_bubble": theoretical_bubble(cfg.stages, cfg.microbatches),
            "time_s": max(r["windows"][-1][1] for r in results) - t0,
            "losses": results[-1]["losses"], "per_stage": bubble["per_stage"],
            "measured_steps": bubble["measured_steps"], "events": events,
            "config": asdict(cfg)}


def train_unsplit(steps: int = 3, batch_size: int = 64, width: int = 128, layers: int = 4,
                  lr: float = 0.1, optimizer: str = "sgd", seed: int = 0) -> list[float]:
    """The reference: the same MLP, batches and SGD in one process, no pipeline.

    Returns the batch loss of every step; a correct pipeline returns the same numbers.
    """
    from workbench.data import load_dataset

    data = load_dataset("digits")
    cfg = PipelineConfig(stages=1, microbatches=1, steps=steps, batch_size=batch_size,
                         width=width, layers=layers, lr=lr, optimizer=optimizer,
                         seed=seed).validate()
    model = nn.Sequential(*make_blocks(data.x.shape[1], width, layers, data.n_classes, seed))
    opt = make_optimizer(optimizer, model.parameters(), lr)
    losses = []
    for idx in batches(len(data.x), cfg):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(data.x[idx]), data.y[idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses

"""Parameter-server lab: synchronous vs asynchronous SGD, with real processes.

One **server** process (rank 0) holds the model; ``N`` **worker** processes (ranks 1..N) each
own a shard of the data. A worker repeatedly *pulls* the current parameters, computes a
gradient on one mini-batch of its shard, and *pushes* it back (``torch.distributed`` send /
recv over gloo, so the messages really cross process boundaries).

* ``mode="sync"``: the server waits for a gradient from **every** worker, averages them and
  applies one update (as synchronous data parallelism does). All gradients were computed on
  the current parameters, so the **staleness is 0 by construction**; the price is that every
  step waits for the slowest worker.
* ``mode="async"``: the server applies **each gradient as it arrives** (Downpour SGD, Dean et
  al., NIPS 2012) and sends that worker fresh parameters. Nobody waits, but a gradient may
  have been computed on parameters that are several updates old. Its **staleness** — the
  number of updates applied since that worker pulled — is measured and reported.
* ``staleness_aware=True`` divides the learning rate by the staleness of each gradient
  (lr / max(1, τ)), so very old gradients move the model less (Zhang, Gupta, Lian & Liu,
  "Staleness-aware Async-SGD for Distributed Deep Learning", IJCAI 2016, arXiv:1511.05950).
* ``mode="backup"`` runs ``N + b`` workers and, in each synchronous step, uses the **first N**
  gradients that arrive and drops the rest (Chen, Pan, Monga, Bengio & Jozefowicz,
  "Revisiting Distributed Synchronous SGD", 2016, arXiv:1604.00981): the step no longer waits
  for the slowest worker, and no stale gradient is ever applied.

``straggler_delay`` makes one worker sleep that many seconds per step, like a slower or
busier machine.

Every mode sees the same number of samples: ``epochs × len(dataset)`` samples' worth of
gradients (in sync mode N mini-batches make one update; in async mode each one does).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from workbench.launch.workers import run_workers

MODES = ("sync", "async", "backup")
#: Version number the server sends to tell a worker to stop.
STOP = -1.0


@dataclass(frozen=True)
class PSConfig:
    """Settings of one parameter-server run (see :func:`run_parameter_server`)."""

    mode: str = "sync"
    workers: int = 2
    epochs: int = 2
    batch_size: int = 32
    lr: float = 0.1
    straggler_delay: float = 0.0
    straggler_worker: int = 0
    staleness_aware: bool = False
    backup_workers: int = 0
    hidden: int = 32
    seed: int = 0

    def validate(self) -> PSConfig:
        """Raise ValueError naming the bad setting and how to fix it; return self."""
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError("epochs and batch_size must be at least 1")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.straggler_delay < 0:
            raise ValueError("straggler_delay is seconds per step and must be ≥ 0, "
                             f"got {self.straggler_delay}")
        if self.backup_workers < 0:
            raise ValueError(f"backup_workers must be ≥ 0, got {self.backup_workers}")
        if self.backup_workers and self.mode != "backup":
            raise ValueError("backup_workers only applies to mode='backup'")
        if not 0 <= self.straggler_worker < self.total_workers:
            raise ValueError(f"straggler_worker must be in 0..{self.total_workers - 1}, "
                             f"got {self.straggler_worker}")
        return self

    @property
    def total_workers(self) -> int:
        """Processes computing gradients: N, plus the b backup workers in backup mode."""
        return self.workers + self.backup_workers


def make_model(in_features: int, n_classes: int, hidden: int, seed: int) -> nn.Module:
    """The lab's model: a one-hidden-layer MLP, initialised from ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))


# --- the worker ---------------------------------------------------------------------------

def _worker(rank: int, cfg: PSConfig, x: torch.Tensor, y: torch.Tensor, n_classes: int) -> dict:
    """Pull parameters, compute a gradient on the next mini-batch of my shard, push it."""
    index = rank - 1
    model = make_model(x.shape[1], n_classes, cfg.hidden, cfg.seed)
    n_params = sum(p.numel() for p in model.parameters())
    shard = torch.arange(index, len(x), cfg.total_workers)  # every total_workers-th sample
    order = shard[torch.randperm(len(shard), generator=torch.Generator().manual_seed(rank))]
    inbox, cursor = torch.zeros(1 + n_params, dtype=torch.float64), 0
    delay = cfg.straggler_delay if index == cfg.straggler_worker else 0.0
    stats = {"worker": index, "gradients": 0, "compute_s": 0.0, "wait_s": 0.0}
    while True:
        start = time.perf_counter()
        dist.recv(inbox, src=0)                               # pull
        stats["wait_s"] += time.perf_counter() - start
        if inbox[0] == STOP:
            return stats
        start = time.perf_counter()
        vector_to_parameters(inbox[1:].float(), model.parameters())
        batch = order[cursor:cursor + cfg.batch_size]
        cursor = cursor + cfg.batch_size if cursor + cfg.batch_size < len(order) else 0
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
        loss.backward()
        grad = parameters_to_vector(p.grad for p in model.parameters()).double()
        time.sleep(delay)                                     # the straggler is slower
        stats["compute_s"] += time.perf_counter() - start
        header = torch.tensor([inbox[0].item(), loss.item()], dtype=torch.float64)
        dist.send(torch.cat([header, grad]), dst=0)           # push (version pulled, loss, grad)
        stats["gradients"] += 1


# --- the server ---------------------------------------------------------------------------

class _Server:
    """State of the parameter server: the model, its version and what it measured."""

    def __init__(self, cfg: PSConfig, x: torch.Tensor, y: torch.Tensor, n_classes: int):
        self.cfg, self.x, self.y = cfg, x, y
        self.model = make_model(x.shape[1], n_classes, cfg.hidden, cfg.seed)
        self.params = parameters_to_vector(self.model.parameters()).detach().double()
        self.version = 0                       # number of updates applied so far
        self.gradients_used = 0
        self.staleness: list[int] = []
        self.dropped = 0
        self.curve: list[dict[str, float]] = []
        self.start = time.perf_counter()

    def send_params(self, worker_rank: int) -> None:
        """Push the current parameters, tagged with their version, to one worker."""
        dist.send(torch.cat([torch.tensor([float(self.version)], dtype=torch.float64),
                             self.params]), dst=worker_rank)

    def send_stop(self, worker_rank: int) -> None:
        dist.send(torch.full((1 + len(self.params),), STOP, dtype=torch.float64),
                  dst=worker_rank)

    def receive(self, inbox: torch.Tensor) -> tuple[int, int, torch.Tensor]:
        """Wait for the next gradient from any worker: (sender rank, version pulled, grad)."""
        sender = dist.recv(inbox)  # no src: whoever is first
        return sender, int(inbox[0].item()), inbox[2:].clone()

    def apply(self, grad: torch.Tensor, lr: float, n_gradients: int) -> None:
        """One SGD step on the server's parameters, then record the loss now and then."""
        self.params -= lr * grad
        self.version += 1
        self.gradients_used += n_gradients
        if self.version % self.eval_every == 0:
            self.record()

    def record(self) -> None:
        """Loss on the whole dataset with the current parameters (one curve point)."""
        loss, acc = self.evaluate()
        self.curve.append({"update": self.version,
                           "samples": self.gradients_used * self.cfg.batch_size,
                           "time_s": time.perf_counter() - self.start, "loss": loss,
                           "accuracy": acc})

    def evaluate(self) -> tuple[float, float]:
        vector_to_parameters(self.params.float(), self.model.parameters())
        with torch.no_grad():
            logits = self.model(self.x)
            loss = nn.functional.cross_entropy(logits, self.y).item()
            acc = (logits.argmax(1) == self.y).float().mean().item()
        return loss, acc

    @property
    def eval_every(self) -> int:
        """Updates between loss measurements: about 10 points per epoch."""
        per_epoch = self.total_gradients / self.cfg.epochs / self.per_update
        return max(1, int(per_epoch // 10))

    @property
    def per_update(self) -> int:
        """Gradients averaged into one update: N in sync/backup mode, 1 in async mode."""
        return 1 if self.cfg.mode == "async" else self.cfg.workers

    @property
    def total_gradients(self) -> int:
        """Mini-batch gradients the run consumes: epochs × ⌈len(dataset) / batch_size⌉."""
        steps = self.cfg.epochs * math.ceil(len(self.x) / self.cfg.batch_size)
        return steps - steps % self.per_update  # whole synchronous steps only


def _serve_async(server: _Server, inbox: torch.Tensor) -> None:
    """Apply every gradient as it arrives; its staleness is the updates since its pull."""
    cfg = server.cfg
    for w in range(1, cfg.total_workers + 1):
        server.send_params(w)
    running = cfg.total_workers
    while running:
        sender, pulled, grad = server.receive(inbox)
        if server.gradients_used >= server.total_gradients:
            server.dropped += 1                     # budget spent: this worker may stop
            server.send_stop(sender)
            running -= 1
            continue
        staleness = server.version - pulled
        server.staleness.append(staleness)
        lr = cfg.lr / max(1, staleness) if cfg.staleness_aware else cfg.lr
        server.apply(grad, lr, 1)
        server.send_params(sender)


def _serve_sync(server: _Server, inbox: torch.Tensor) -> None:
    """Each update averages the first N gradients computed on the current parameters.

    With no backup workers these are *all* the gradients, so staleness is always 0. With b
    backup workers the b slowest gradients of each step arrive late (their version is old)
    and are dropped; their workers get the current parameters and carry on.
    """
    cfg = server.cfg
    for w in range(1, cfg.total_workers + 1):
        server.send_params(w)
    idle: list[int] = []                            # workers waiting for new parameters
    collected: list[torch.Tensor] = []
    running = cfg.total_workers
    while running:
        sender, pulled, grad = server.receive(inbox)
        done = server.gradients_used >= server.total_gradients
        if done:
            server.send_stop(sender)
            running -= 1
            continue
        if pulled != server.version:                # late: a step already went ahead
            server.dropped += 1
            server.send_params(sender)
            continue
        server.staleness.append(server.version - pulled)   # 0, measured all the same
        collected.append(grad)
        idle.append(sender)
        if len(collected) == cfg.workers:
            server.apply(torch.stack(collected).mean(0), cfg.lr, cfg.workers)
            collected.clear()
            finished = server.gradients_used >= server.total_gradients
            for w in idle:
                if finished:
                    server.send_stop(w)
                    running -= 1
                else:
                    server.send_params(w)
            idle.clear()


def _process(rank: int, world: int, cfg: PSConfig, x: torch.Tensor, y: torch.Tensor,
             n_classes: int) -> dict:
    """Entry point of every process: rank 0 serves, the others are workers."""
    if rank > 0:
        return _worker(rank, cfg, x, y, n_classes)
    server = _Server(cfg, x, y, n_classes)
    inbox = torch.zeros(2 + len(server.params), dtype=torch.float64)
    server.record()
    server.start = time.perf_counter()
    (_serve_async if cfg.mode == "async" else _serve_sync)(server, inbox)
    time_s = time.perf_counter() - server.start
    if server.curve[-1]["update"] != server.version:
        server.record()
    loss, acc = server.evaluate()
    return {"time_s": time_s, "final_loss": loss, "final_accuracy": acc,
            "updates": server.version, "gradients_used": server.gradients_used,
            "gradients_dropped": server.dropped, "staleness": server.staleness,
            "curve": server.curve}


def run_parameter_server(mode: str = "sync", workers: int = 2, epochs: int = 2, *,
                         straggler_delay: float = 0.0, straggler_worker: int = 0,
                         staleness_aware: bool = False, backup_workers: int = 0,
                         lr: float = 0.1, batch_size: int = 32, hidden: int = 32,
                         seed: int = 0, runs_dir: str = "runs",
                         timeout: float = 300.0) -> dict[str, Any]:
    """Train an MLP on scikit-learn's digits with a parameter server and N worker processes.

    Returns a dict with ``mode``, ``final_loss`` (cross-entropy on all 1,797 digits),
    ``final_accuracy``, ``time_s`` (wall-clock seconds of training, measured by the server),
    ``mean_staleness``, ``max_staleness`` (over the applied gradients), ``updates``,
    ``gradients_dropped``, ``loss_curve`` (``update, samples, time_s, loss, accuracy``), the
    per-worker ``workers`` statistics (``gradients`` pushed, ``compute_s``, ``wait_s``: seconds
    blocked waiting for parameters) and the ``config``.
    """
    cfg = PSConfig(mode=mode, workers=workers, epochs=epochs, batch_size=batch_size, lr=lr,
                   straggler_delay=straggler_delay, straggler_worker=straggler_worker,
                   staleness_aware=staleness_aware, backup_workers=backup_workers,
                   hidden=hidden, seed=seed).validate()
    from workbench.data import load_dataset

    data = load_dataset("digits")
    names = ["server"] + [f"worker {i} (rank {i + 1})" for i in range(cfg.total_workers)]
    results = run_workers(_process, cfg.total_workers + 1, (cfg, data.x, data.y, data.n_classes),
                          name=f"ps-{mode}", runs_dir=runs_dir, timeout=timeout, names=names,
                          settings=asdict(cfg))
    server = results[0]
    staleness = server.pop("staleness")
    return {"mode": mode, "final_loss": server["final_loss"], "time_s": server["time_s"],
            "mean_staleness": sum(staleness) / len(staleness) if staleness else 0.0,
            "max_staleness": max(staleness, default=0),
            "staleness_histogram": _histogram(staleness),
            "final_accuracy": server["final_accuracy"], "updates": server["updates"],
            "gradients_used": server["gradients_used"],
            "gradients_dropped": server["gradients_dropped"],
            "loss_curve": server["curve"], "workers": results[1:], "config": asdict(cfg)}


def _histogram(values: list[int]) -> dict[str, int]:
    """How many gradients had each staleness: {"0": 12, "1": 30, ...} (JSON-friendly keys),
    every staleness from 0 to the largest listed, none seen included: a bar chart of it has
    no gap that hides a zero."""
    counts = {str(v): 0 for v in range(max(values, default=-1) + 1)}
    for v in values:
        counts[str(v)] += 1
    return counts

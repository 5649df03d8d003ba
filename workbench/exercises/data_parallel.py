"""Exercise: make this training loop data-parallel, and prove it by running it on real ranks.

The student gets `train`, a working single-process training function, and writes its
Horovod version (then its DDP version). `check_data_parallel(fn, engine=...)` runs the
student's function on 2 and then 3 real ranks, each time with other arguments (batch size,
learning rate, epochs, and a seed drawn at each check, so that a number written where an
argument belongs fails), and compares the final parameters with `train` run in one process
with the global batch: N ranks × batch b is exactly one process × batch N·b at the same
learning rate (workbench/training/sharding.py). Each rank gets another seed (rank 0 the
given one), as separate machines would, so that a missing broadcast shows.

From how the parameters came out the checker names the mistake: ranks that differ by their
starting points (no broadcast) or otherwise (no averaging); agreeing with one process of
batch b (no sharding), with lr × N (summing, or the rate scaled), with make_model(0) (the
seed ignored); or right, but written by more than rank 0.

Right parameters are not enough: training the whole global batch on every rank from a fixed
seed, with no collective, ends with them too. So each rank is watched
(`workbench.exercises.watch`): the samples each step's backward passes used, the
optimizer's learning rates, and the collectives it called. Data-parallel work means the
ranks' samples in every step are disjoint shares of the global batch, gradients (or
parameters) crossed ranks, and the rate is the one given (summing the gradients and halving
the rate gives the right parameters on 2 ranks, and is not the average). Any sharding and
any way of combining that gives the serial result passes: slices or strides,
`DistributedOptimizer` or DDP, or averaging the parameters after each plain-SGD step.
"""

from __future__ import annotations

import random
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import workbench
from workbench.exercises.feedback import (
    CHECK_CPU_BIND,
    Feedback,
    correct,
    guarded,
    not_written,
    not_yet,
    refuse_before_ranks,
)
from workbench.exercises.watch import watching

#: The exercise's sizes: 128 samples, batch 8 per rank (16 global), 2 epochs = 16 steps.
SAMPLES, FEATURES, BATCH, LR, EPOCHS, SEED = 128, 8, 8, 0.1, 2, 0
#: The checks: (ranks, the arguments other than the data and the seed).
RUNS = ((2, dict(batch_size=BATCH, lr=LR, epochs=EPOCHS)),
        (3, dict(batch_size=6, lr=0.05, epochs=1)))
#: Rank r trains with seed SEED + SEED_STEP · r (only rank 0's weights may survive).
SEED_STEP = 1000
#: Parameters "agree" within this tolerance: allreduce sums in a different order than one
#: process does, so float32 results differ in the last digits, never by more.
ATOL, RTOL = 1e-5, 1e-4


def make_data(samples: int = SAMPLES, features: int = FEATURES) -> tuple[torch.Tensor, ...]:
    """A fixed regression data set (x, y), the same on every rank."""
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, features, generator=gen)
    y = torch.sin(x @ torch.randn(features, 1, generator=gen))
    return x, y


def make_model(seed: int) -> nn.Module:
    """A small MLP whose initial weights depend only on `seed`."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))


def train(data, batch_size=BATCH, lr=LR, epochs=EPOCHS, seed=SEED, checkpoint="runs/model.pt"):
    """The single-process training loop the student makes data-parallel (and the reference)."""
    x, y = data
    model = make_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _epoch in range(epochs):
        for start in range(0, len(x) - batch_size + 1, batch_size):
            xb, yb = x[start:start + batch_size], y[start:start + batch_size]
            optimizer.zero_grad()
            loss = F.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
            workbench.report(loss=loss.item(), samples=len(xb))
    torch.save(model.state_dict(), checkpoint)
    return model.state_dict()


@guarded
def check_data_parallel(fn: Callable[..., Any], engine: str = "horovod", *,
                        runs_dir: str = "runs", timeout_s: float = 120.0) -> Feedback:
    """Run `fn(data, batch_size, lr, epochs, seed, checkpoint)` on 2, then 3 real ranks and
    check it.

    `fn` must return its model's `state_dict()` (or the model). Returns a Feedback; a wrong
    answer gets a hint naming the mistake (see the module docstring).
    """
    refused = refuse_before_ranks(fn, "train(data, batch_size, lr, epochs, seed, checkpoint)",
                                  data=None, batch_size=BATCH, lr=LR, epochs=EPOCHS,
                                  seed=SEED, checkpoint="")
    if refused:
        return refused
    verdicts = []
    for np, arguments in RUNS:
        with tempfile.TemporaryDirectory(prefix="dp-check-") as folder:  # for the checkpoint
            kwargs = dict(data=make_data(), seed=random.randrange(1, 1000), **arguments,
                          checkpoint=str(Path(folder) / "model.pt"))
            verdict = _run_and_judge(fn, engine, np, kwargs, runs_dir, timeout_s)
        if not verdict.passed:
            return verdict
        verdicts.append(verdict)
    return correct(" ".join(v.message for v in verdicts))


def _run_and_judge(fn: Callable[..., Any], engine: str, np: int, kwargs: dict[str, Any],
                   runs_dir: str, timeout_s: float) -> Feedback:
    """Launch `fn` on `np` ranks with `kwargs` and judge the outcome."""
    try:
        with warnings.catch_warnings():   # 3 ranks on fewer cores, on purpose: in the record
            warnings.simplefilter("ignore", UserWarning)
            job = workbench.launch(run_on_rank, fn, kwargs, np=np, engine=engine,
                                   runs_dir=runs_dir, name=f"check-{engine}",
                                   stall_timeout=timeout_s, cpu_bind=CHECK_CPU_BIND)
    except workbench.ConfigError as err:
        return not_yet(f"your function could not be started: {err}",
                       "Everything the function uses must be created inside it or be "
                       "importable (torch, horovod.torch, workbench).")
    if job.wait(timeout_s) == "running":
        job.stop()
        return not_yet(f"the {np} ranks did not finish within {timeout_s:g} s.",
                       "A rank may be waiting in an allreduce that another rank never "
                       "starts: every rank must run the same collective calls in the same "
                       "order (e.g. no allreduce inside `if rank == 0`).")
    if job.status != "succeeded":
        failure = (job.summary or {}).get("failure") or {}
        if str(failure.get("error", "")).startswith("NotImplementedError"):
            return not_written()
        return not_yet(f"the job {job.status}: rank {failure.get('rank')} "
                       f"{failure.get('error')}",
                       "Read the traceback above (or `workbench show " + job.run_id + "`); "
                       "run the function once in the notebook to find the line.")
    return judge(job.results(), kwargs, np)


def run_on_rank(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What each rank runs: the student's `fn`, with this rank's seed, watching what it does.

    Counts the checkpoints it writes (`torch.save`), and records the samples of each step,
    the learning rates and the collective calls (see :mod:`workbench.exercises.watch`);
    returns them with the final parameters.
    """
    rank = workbench.rank()
    saves: list[str] = []
    real_save = torch.save

    def save(obj, f, *args, **kw):
        saves.append(str(f))
        return real_save(obj, f, *args, **kw)

    torch.save = save
    try:
        with watching(kwargs["data"][0]) as watch:
            state = fn(**{**kwargs, "seed": kwargs["seed"] + SEED_STEP * rank})
    finally:
        torch.save = real_save
    return {"params": _params(state), "saves": len(saves), **watch.report()}


def judge(results: list[dict[str, Any]], kwargs: dict[str, Any], np: int) -> Feedback:
    """The verdict from each rank's final parameters, checkpoints and learning rates."""
    if any(r["params"] is None for r in results):
        return not_yet("a rank returned no parameters.",
                       "End the function with `return model.state_dict()` (with DDP: "
                       "`model.module.state_dict()`).")
    p = [r["params"] for r in results]
    b, lr, data = kwargs["batch_size"], kwargs["lr"], kwargs["data"]
    serial = dict(data=data, epochs=kwargs["epochs"], seed=kwargs["seed"])
    if not all(_close(p[0], q) for q in p[1:]):
        starts = [_params(make_model(kwargs["seed"] + SEED_STEP * r)) for r in range(np)]
        if _close(_minus(p[1], p[0]), _minus(starts[1], starts[0])):
            return not_yet("the ranks' final parameters differ by exactly the difference "
                           "of their random starting weights.",
                           "Broadcast rank 0's initial parameters to every rank before "
                           "training (Horovod: hvd.broadcast_parameters(model.state_dict(), "
                           "root_rank=0); DDP's constructor does it for you).")
        return not_yet("the ranks end with different parameters: each one followed its own "
                       "gradients.",
                       "Average the gradients across ranks before every step (Horovod: wrap "
                       "the optimizer in hvd.DistributedOptimizer; torch: wrap the model in "
                       "DistributedDataParallel).")
    if not _close(p[0], _params(_serial(serial, b * np, lr))):
        return _why_not_serial(p[0], results, serial, b, lr, np)
    other = sorted({x for r in results for x in r["lrs"] if abs(x - lr) > 1e-12})
    if other:
        return not_yet(f"with {np} ranks the parameters are right, but your optimizer used "
                       f"lr = {other[0]:g}, not the lr = {lr:g} it was given: summed "
                       "gradients with a rate divided by the number of ranks give the "
                       "average's step for plain SGD only, and only for that many ranks.",
                       "Average the gradients, and keep the learning rate you were given.")
    undistributed = _no_distributed_work(results, b)
    if undistributed:
        return undistributed
    writers = [rank for rank, r in enumerate(results) if r["saves"]]
    if writers != [0]:
        if not writers:
            return not_yet("no rank wrote the checkpoint.",
                           "Save the model on rank 0: `if rank == 0: torch.save(...)`.")
        return not_yet(f"rank(s) {writers} wrote the checkpoint: every rank writes the same "
                       "file, and on a shared disk they overwrite each other's half-written "
                       "copies.", "Save on rank 0 only: `if hvd.rank() == 0: torch.save(...)`.")
    return correct(f"{np} ranks with batch {b} and lr {lr:g} ended with the same parameters "
                   f"as one process with batch {np * b}, and only rank 0 wrote the checkpoint.")


def _no_distributed_work(results: list[dict[str, Any]], b: int) -> Feedback | None:
    """Feedback when the right parameters came without data-parallel work, else None."""
    steps = [r.get("steps") or [] for r in results]
    if any(not any(s) for s in steps):
        return not_yet("the checker saw no gradient computed from samples of the data set "
                       "on some rank.", "Train as `train` does: call the model on the slice "
                       "of x for this rank's shard, with gradients on.")
    for k, shards in enumerate(zip(*steps, strict=False)):
        mine = [set(s) for s in shards]
        shared = set.intersection(*mine)
        if shared or any(len(s) > b for s in mine):
            return not_yet(
                f"the parameters are right, but in step {k} every rank computed on the same "
                f"samples ({len(shared)} of them shared, {max(map(len, mine))} per rank): "
                "each rank trained the whole global batch by itself. That is serial training "
                "done twice, with no distributed work.",
                f"Give each rank its own shard of each global batch (b = {b} samples per "
                "rank), and average the gradients across ranks so that the shards' work adds "
                "up to one step.")
    if not all(r.get("collectives") for r in results):
        return not_yet("each rank computed on its own shard, but no collective call was seen "
                       "on some rank: nothing crossed ranks.",
                       "Average the gradients with hvd.DistributedOptimizer, DDP or "
                       "hvd.allreduce / dist.all_reduce.")
    return None


def _why_not_serial(p0: dict, results: list[dict[str, Any]], serial: dict[str, Any], b: int,
                    lr: float, np: int) -> Feedback:
    """The ranks agree with each other, but not with the reference: name the mistake."""
    if _close(p0, _params(_serial(serial, b * np, lr * np))):
        if any(abs(x - lr * np) < 1e-12 for r in results for x in r["lrs"]):
            return not_yet(f"your optimizer used lr = {lr * np:g}, {np} x the lr of {lr:g}: "
                           f"with averaged gradients, {np} ranks with batch {b} already take "
                           f"the steps of one process with batch {np * b} at lr {lr:g}.",
                           "Keep the learning rate you were given. Scale it (lr x size) only "
                           "when you also mean to train with the larger global batch, and "
                           "compare against that.")
        return not_yet(f"your steps are {np} x too large: the gradients were summed over the "
                       "ranks, not averaged.",
                       "Average, don't sum: hvd.DistributedOptimizer(..., op=hvd.Average) "
                       "(the default), or divide an all_reduce's sum by the world size.")
    if _close(p0, _params(_serial(serial, b, lr))):
        return not_yet("every rank trained on the whole data set: the result is one process "
                       f"with batch {b}, not {np * b}.",
                       "Give each rank its own shard of every global batch: rank r takes "
                       "samples [start + r*b, start + (r+1)*b) of each global batch of "
                       "size*b samples.")
    if serial["seed"] != SEED and _close(p0, _params(_serial({**serial, "seed": SEED}, b * np,
                                                              lr))):
        return not_yet(f"the ranks agree, but they started from make_model({SEED}), not from "
                       f"the seed they were given ({serial['seed']} on rank 0).",
                       "Build the model from the seed argument, and broadcast rank 0's "
                       "parameters: the other ranks get other seeds.")
    ignored = _arguments_ignored(results, b, lr, np)
    if ignored:
        return ignored
    return not_yet(f"the ranks agree, but not with one process with batch {np * b}.",
                   "Check the shards: step over the data in global batches of size*b, and "
                   "let rank r take the r-th slice of b samples of each one, in order.")


def _arguments_ignored(results: list[dict[str, Any]], b: int, lr: float,
                       np: int) -> Feedback | None:
    """Feedback naming the arguments the ranks trained without (a batch size or a rate
    written as numbers), from what they were seen doing, else None."""
    sizes = Counter(len(step) for r in results for step in (r.get("steps") or []) if step)
    rates = sorted({x for r in results for x in r["lrs"] if abs(x - lr) > 1e-12})
    ignored = [f"batch_size = {b} (each rank took {sizes.most_common(1)[0][0]} samples a "
               "step)"] if sizes and sizes.most_common(1)[0][0] != b else []
    ignored += [f"lr = {lr:g} (your optimizer used {rates[0]:g})"] if rates else []
    if not ignored:
        return None
    return not_yet(f"with {np} ranks, your function did not use the arguments it was given: "
                   f"{'; '.join(ignored)}.", "Train with the arguments batch_size, lr and "
                   "epochs: the checker passes other values at each world size.")


def _serial(serial: dict[str, Any], batch: int, lr: float) -> dict[str, torch.Tensor]:
    """The reference: `train` in this process with one batch size and learning rate."""
    with tempfile.TemporaryDirectory() as folder:
        return train(batch_size=batch, lr=lr, checkpoint=str(Path(folder) / "m.pt"), **serial)


def _params(state: Any) -> dict[str, torch.Tensor] | None:
    """{name: tensor} from a state_dict or a model, without DDP's "module." prefix."""
    if isinstance(state, nn.Module):
        state = state.state_dict()
    if not isinstance(state, dict):
        return None
    return {k.removeprefix("module."): torch.as_tensor(v).detach().double().cpu()
            for k, v in state.items()}


def _minus(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: a[k] - b[k] for k in a}


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(
        torch.allclose(a[k], b[k], atol=ATOL, rtol=RTOL) for k in a)

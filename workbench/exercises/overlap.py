"""Exercise: write the hook that starts a bucket's all-reduce during the backward pass.

The student writes `launch(bucket, pending)`, which the overlapped engine
(workbench/data_parallel/overlapped.py) calls each time autograd finishes one gradient of
`bucket`: when the bucket's last gradient is in, it packs the bucket and starts its
all-reduce asynchronously, appending `(bucket, handle)` to `pending`. The engine waits on
the handles before the optimizer steps.

`check_launch_hook(launch)` runs it on 2 real torch ranks (`workbench.launch`, on warm
ranks when `workbench.ranks(np=2, engine="torch")` runs): a few SGD steps of a 4-layer MLP
whose gradients fill several buckets, and requires

1. the serial parameters: 2 ranks × batch b equal one process with batch 2·b;
2. every bucket's all-reduce started *before* `backward()` returned, and the first one
   before the backward pass had produced its last gradient: observed, from the times at
   which the engine saw each launch, each gradient finish, and backward return;
3. no handle waited on before `backward()` returned: a hook that waits for its own
   all-reduce starts it in time but makes backward stand still while it travels. Each
   handle `dist.all_reduce` returns on the ranks notes when its `wait()` is called.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from workbench.exercises.feedback import (
    Feedback,
    correct,
    guarded,
    not_yet,
    on_real_ranks,
    refuse_before_ranks,
)

#: Sizes: a 16 → 32 → 32 → 32 → 4 MLP, 4 steps of batch 8 per rank, 1 KiB buckets.
FEATURES, WIDTH, CLASSES, BATCH, STEPS, LR, BUCKET_MB = 16, 32, 4, 8, 4, 0.1, 1 / 1024
ATOL = 1e-5


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH),
                         nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                         nn.Linear(WIDTH, CLASSES))


def make_data(ranks: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    n = STEPS * ranks * BATCH
    return torch.randn(n, FEATURES, generator=gen), torch.randint(0, CLASSES, (n,), generator=gen)


def serial_params(ranks: int) -> list[torch.Tensor]:
    """One process, batch ranks·b: the parameters the ranks must end with."""
    model, (x, y) = make_model(), make_data(ranks)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        rows = slice(step * ranks * BATCH, (step + 1) * ranks * BATCH)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


class _Watched:
    """An all-reduce handle that notes when it is waited on (`waits`, perf_counter s)."""

    def __init__(self, work: Any, waits: list[float]) -> None:
        self._work, self._waits = work, waits

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        self._waits.append(time.perf_counter())
        return self._work.wait(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


@contextlib.contextmanager
def _watching_waits(waits: list[float]) -> Iterator[None]:
    """While in the block, this rank's `dist.all_reduce(..., async_op=True)` returns watched
    handles (and after it, the plain ones again: a warm rank runs later calls too)."""
    import torch.distributed as dist

    all_reduce = dist.all_reduce

    def watched(*args: Any, **kwargs: Any) -> Any:
        work = all_reduce(*args, **kwargs)
        return None if work is None else _Watched(work, waits)

    dist.all_reduce = watched
    try:
        yield
    finally:
        dist.all_reduce = all_reduce


def run_on_rank(launch: Callable[..., Any]) -> dict[str, Any]:
    """What each rank runs: a few SGD steps with the student's hook, noting when things
    happened."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    waits: list[float] = []
    try:
        with _watching_waits(waits):
            return _train(dist.get_rank(), dist.get_world_size(), launch, waits)
    finally:
        dist.destroy_process_group()


def _train(rank: int, size: int, launch: Callable[..., Any], waits: list[float],
           ) -> dict[str, Any]:
    from workbench.data_parallel.overlapped import OverlappedSync

    torch.set_num_threads(1)
    model, (x, y) = make_model(), make_data(size)
    sync = OverlappedSync(model, size, BUCKET_MB, launch=launch)
    grad_times: list[float] = []
    for p in model.parameters():   # registered after the engine's: runs after its launch
        p.register_post_accumulate_grad_hook(lambda _p: grad_times.append(time.perf_counter()))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    steps = []
    for step in range(STEPS):
        rows = slice((step * size + rank) * BATCH, (step * size + rank + 1) * BATCH)
        opt.zero_grad()
        grad_times.clear()
        waits.clear()
        try:
            nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
            backward_end = time.perf_counter()
            sync.wait_for_gradients(opt)
        except Exception as exc:   # the student's mistake, reported as feedback
            return {"error": f"{type(exc).__name__}: {exc}", "step": step}
        opt.step()
        steps.append({"launches": list(sync.last_launch_times), "grads": list(grad_times),
                      "backward_end": backward_end, "waits": list(waits)})
    want = serial_params(size)
    gap = max(float((p.detach() - w).abs().max()) for p, w in zip(model.parameters(), want,
                                                                 strict=True))
    return {"gap": gap, "steps": steps, "buckets": len(sync.buckets)}


@guarded
def check_launch_hook(fn: Callable[..., Any], *, runs_dir: str = "runs",
                      timeout_s: float = 120.0) -> Feedback:
    """Run the student's `launch(bucket, pending)` on 2 real ranks and judge it."""
    refused = refuse_before_ranks(fn, "launch(bucket, pending)", None, [])
    if refused:
        return refused
    results = on_real_ranks(run_on_rank, fn, np=2, name="check-overlap", runs_dir=runs_dir,
                            timeout_s=timeout_s, hang_hint=(
                                "Both ranks must start the same all-reduces in the same "
                                "order: launch every bucket on every rank."))
    return results if isinstance(results, Feedback) else judge(results)


def judge(results: list[dict[str, Any]]) -> Feedback:
    """The verdict from what each rank returned (see `_rank`)."""
    for r, result in enumerate(results):
        if "error" in result:
            return not_yet(f"on rank {r}, step {result['step']}: {result['error']}",
                           *_hints_for(result["error"]))
    for r, result in enumerate(results):
        for s, step in enumerate(result["steps"]):
            late = [t for t in step["launches"] if t > step["backward_end"]]
            if late or not step["launches"]:
                return not_yet(f"rank {r}, step {s}: {len(late)} all-reduce(s) started after "
                               "backward() had returned: nothing overlapped.",
                               "Start the all-reduce inside the hook, as soon as the bucket's "
                               "last gradient is ready.")
            early = [t for t in step.get("waits", []) if t <= step["backward_end"]]
            if early:
                return not_yet(f"rank {r}, step {s}: your hook waited for {len(early)} "
                               "all-reduce(s) before backward() returned: backward stood "
                               "still while the gradients travelled, so nothing overlapped.",
                               "Append the handle without calling its wait(): the engine "
                               "waits on every handle before the optimizer steps.")
            if min(step["launches"]) >= max(step["grads"]):
                return not_yet(f"rank {r}, step {s}: the first all-reduce started only after "
                               "the backward pass had produced its last gradient.",
                               "Launch each bucket when *its* gradients are ready "
                               "(bucket.ready == len(bucket.params)), not when all are.")
    gap = max(result["gap"] for result in results)
    if gap > ATOL:
        return not_yet(f"the parameters differ from one process with batch 2·b by {gap:.3g}.",
                       "The all-reduce must sum the packed gradients: call bucket.pack() "
                       "(it copies the gradients into bucket.buffer and returns it), and "
                       "all-reduce that buffer.")
    buckets = results[0]["buckets"]
    return correct(f"on 2 real ranks your hook started all {buckets} buckets' all-reduces "
                   "during backward(), the first before the last gradient was computed, and "
                   f"the parameters match the serial run (within {gap:.1g}).")


def _hints_for(error: str) -> list[str]:
    if "all-reduces were started" in error:
        return ["Count the bucket's ready gradients (bucket.ready += 1) and start the "
                "all-reduce exactly once, when bucket.ready == len(bucket.params)."]
    if "'NoneType'" in error:
        return ["A gradient was still None: the bucket was packed before all its gradients "
                "were ready. Wait until bucket.ready == len(bucket.params).",
                "dist.all_reduce(..., async_op=True) returns the handle to append; without "
                "async_op it returns None."]
    return ["Read the error, fix that line of your function, and run the check again."]

"""torchrun --standalone --nproc-per-node 2 -m workbench.data_parallel.overlapped

One rank of an overlapped data-parallel job (`workbench run --engine overlapped`), or
started by hand as above with any flag of `workbench run` (`--bucket-mb 1`).

The bucketed engine's buckets, sent sooner. Every parameter gets a
`register_post_accumulate_grad_hook`: autograd calls it as soon as that parameter's
gradient is complete, while the layers below are still being differentiated. When the
last gradient of a bucket is in, `launch_when_full` packs the bucket and *starts* its
all-reduce (`async_op=True` returns a handle at once); `backward()` carries on with the
next layers meanwhile. Before the optimizer steps, `wait_for_gradients` waits on every
handle and unpacks the means. Only the communication still running when `backward()`
returns shows as synchronization time: the rest is hidden. This is DDP's design (Li et al.,
VLDB 2020, Section 3.2.3), written in Python.

With gradient accumulation (`--accumulate k`) only the step's last micro-batch launches
the all-reduces, like DDP's `no_sync()` on the others: k backward passes, one all-reduce
of the summed gradients.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch
import torch.distributed as dist

from workbench.data_parallel.bucketed import BucketedSync, run
from workbench.data_parallel.buckets import Bucket
from workbench.rank.context import run_main

#: What a launch hook is given: the bucket one of whose gradients is now ready, and the
#: list where it puts (bucket, all-reduce handle) once it has started that bucket's all-reduce.
LaunchHook = Callable[[Bucket, list], None]


def launch_when_full(bucket: Bucket, pending: list) -> None:
    """Called once per gradient of `bucket`, as autograd finishes it: when it is the
    bucket's last, pack the bucket and start its all-reduce without waiting for it."""
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        work = dist.all_reduce(bucket.pack(), async_op=True)
        pending.append((bucket, work))


class OverlappedSync(BucketedSync):
    """Buckets all-reduced asynchronously as backward() fills them; waited before the step."""

    def __init__(self, model: torch.nn.Module, size: int, bucket_mb: float,
                 launch: LaunchHook = launch_when_full) -> None:
        super().__init__(model, size, bucket_mb)
        self.launch, self.pending, self.armed = launch, [], True
        self.launch_times: list[float] = []   # time.perf_counter() of each launch, this step
        self.last_launch_times: list[float] = []   # ... and of the last step waited for
        for bucket in self.buckets:
            for p in bucket.params:
                p.register_post_accumulate_grad_hook(self._hook(bucket))

    def _hook(self, bucket: Bucket) -> Callable[[torch.Tensor], None]:
        def on_gradient(_param: torch.Tensor) -> None:
            if self.armed:   # not during the first k-1 micro-batches of an accumulated step
                started = len(self.pending)
                self.launch(bucket, self.pending)
                self.launch_times += [time.perf_counter()] * (len(self.pending) - started)
        return on_gradient

    @contextmanager
    def _armed(self, last: bool):
        self.armed = last
        try:
            yield
        finally:
            self.armed = True

    def accumulating(self, model: torch.nn.Module, last: bool) -> AbstractContextManager[Any]:
        return self._armed(last)

    def wait_for_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        launched = {id(bucket) for bucket, _ in self.pending}
        missing = [k for k, b in enumerate(self.buckets) if id(b) not in launched]
        if missing or len(self.pending) != len(self.buckets):
            raise RuntimeError(
                f"{len(self.pending)} all-reduces were started for {len(self.buckets)} buckets "
                f"(never started: buckets {missing}): the launch hook must start each bucket's "
                "all-reduce exactly once, when its last gradient is ready")
        self.sent = 0
        for bucket, work in self.pending:
            work.wait()
            bucket.unpack(self.size)
            self.sent += bucket.nbytes
        self.pending, self.last_launch_times, self.launch_times = [], self.launch_times, []


def main() -> None:
    run("overlapped", OverlappedSync)


if __name__ == "__main__":
    run_main(main)

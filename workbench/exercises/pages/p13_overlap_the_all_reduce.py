"""Exercise 13: start each bucket's all-reduce during the backward pass."""

from workbench.notebooks import code, function_task, md

NAME = "13_overlap_the_all_reduce.ipynb"

CELLS = [
    md(r"""
# Exercise 13: overlap the all-reduce with the backward pass

**Goals.** After this exercise you can
- say why DDP packs gradients into buckets and when it sends each one,
- write the hook that starts a bucket's all-reduce while `backward()` is still running,
- check on 2 real ranks that it both trains exactly and overlaps.

**Time:** about 20 minutes.
"""),
    md(r"""
## Background

The naive engine all-reduces every gradient after `backward()` has returned, one tensor at a
time. DDP (Li et al., VLDB 2020, §3.2.3) does two things better:

1. **Buckets.** Gradients are packed into flat buffers of about 25 MiB, so one all-reduce
   pays the latency term $2(p-1)\alpha$ for many tensors.
2. **Overlap.** Autograd produces gradients from the last layer to the first. As soon as a
   bucket's last gradient is ready, its all-reduce is *started* asynchronously, and the
   backward pass carries on with the layers below. The step waits for the handles only
   before the optimizer runs.

`workbench.data_parallel.overlapped` is that engine in Python. It calls a *launch hook*
each time one gradient of a bucket is ready (from `register_post_accumulate_grad_hook`).
A `Bucket` has `params`, a counter `ready` (the engine sets it back to 0 after each step),
and `pack()`, which copies the gradients into `bucket.buffer` and returns it:
"""),
    code(r"""
import inspect

import torch.distributed as dist  # noqa: F401 (your launch() uses it)

from workbench.data_parallel import buckets
from workbench.exercises import overlap as ex

print(inspect.getsource(buckets.Bucket.pack))
"""),
    md(r"""
## Your task

Write `launch(bucket, pending)`. The engine calls it once per gradient of `bucket`, as
autograd finishes that gradient. When the bucket's last gradient is in, the bucket's
gradients must be packed into its buffer and that buffer's all-reduce started, to travel
while `backward()` goes on with the layers below; `(bucket, handle)` goes into `pending`,
and the hook returns at once. (`torch.distributed`'s collectives start without waiting when
given `async_op=True`, and return a handle; the engine waits on the handles after
`backward()` has returned, and divides by the number of ranks when it unpacks.)

The checker trains a 4-layer MLP on 2 real ranks with your hook and requires the parameters
of one process with batch $2b$. It measures for itself: when each gradient was ready, when
each all-reduce started and on which buffer, and whether anything in `backward()` waited
for the network (its network delivers nothing until `backward()` returns, so a hook that
waits, polls or synchronizes is noticed).
"""),
    function_task(r'''
def launch(bucket, pending):
    """Start the all-reduce of `bucket` once its last gradient is ready; note the handle."""
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        handle = dist.all_reduce(bucket.pack(), async_op=True)
        pending.append((bucket, handle))
''', todo="Your code here: count this gradient, and launch when the bucket is full."),
    md(r"""
The check runs on two **warm ranks** (`workbench.ranks`), which `torchrun` starts once: the
first check waits for them, and every later one starts in a fraction of a second.
"""),
    code(r"""
import workbench

pool = workbench.ranks(np=2, engine="torch")   # the checker's launch() uses it
"""),
    code("ex.check_launch_hook(launch)"),
    code(r"""
pool.close()   # frees its two cores for other jobs
"""),
    md(r"""
## Questions to think about

- With one bucket holding every gradient, what would overlap? And with one bucket per
  tensor, what would each all-reduce cost?
- Why does the engine launch nothing during the first $k-1$ micro-batches of a step with
  gradient accumulation (DDP's `no_sync()`)?
"""),
    md(r"""
## Summary

- A bucket is sent as soon as its last gradient exists; the all-reduce runs while autograd
  differentiates the layers below, and only the part still running when `backward()`
  returns costs time.
- The order matters: buckets are filled from the last parameter to the first, the order in
  which `backward()` produces gradients.
- DDP does the same in C++, with 25 MiB buckets (`bucket_cap_mb`) and a first
  bucket of 1 MiB; Horovod's Tensor Fusion groups ready tensors in its background thread.
"""),
]

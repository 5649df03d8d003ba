"""Exercise 13, the launch hook: `launch(bucket, pending)`, judged on 2 real ranks."""

import threading
import time

import torch
import torch.distributed as dist
from torch.distributed import all_reduce  # bound before the checker's network exists

from mutants import accepted, refused

# --- right, written other ways ------------------------------------------------------------


@accepted()
def counts_first_then_returns_early(bucket, pending):
    bucket.ready = bucket.ready + 1
    if bucket.ready < len(bucket.params):
        return
    handle = dist.all_reduce(bucket.pack(), async_op=True)
    pending.append((bucket, handle))


@accepted()
def appends_the_future(bucket, pending):
    """A future's wait() is what the engine calls: the handle's future serves as well."""
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        pending.append((bucket, dist.all_reduce(bucket.pack(), async_op=True).get_future()))


@accepted()
def packs_by_hand_with_an_alias_imported_early(bucket, pending):
    """Its own packing loop, and `all_reduce` imported before the check began."""
    bucket.ready += 1
    if bucket.ready != len(bucket.params):
        return
    offset = 0
    for p in bucket.params:
        bucket.buffer[offset:offset + p.numel()] = p.grad.flatten()
        offset += p.numel()
    pending.append((bucket, all_reduce(bucket.buffer, async_op=True)))


@accepted()
def through_the_process_group_itself(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        group = dist.distributed_c10d._get_default_group()
        pending.append((bucket, group.allreduce([bucket.pack()])))


# --- refused: backward() held up --------------------------------------------------------------


@refused("called wait()", "nothing overlapped", "no wait()")
def waits_for_its_all_reduce(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        handle = dist.all_reduce(bucket.pack(), async_op=True)
        handle.wait()
        pending.append((bucket, handle))


@refused("called is_completed()", "nothing overlapped")
def polls_until_complete(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        handle = dist.all_reduce(bucket.pack(), async_op=True)
        while not handle.is_completed():
            pass
        pending.append((bucket, handle))


@refused("get_future().wait()", "nothing overlapped")
def waits_on_the_future(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        handle = dist.all_reduce(bucket.pack(), async_op=True)
        handle.get_future().wait()
        pending.append((bucket, handle))


class _Done:
    def wait(self):
        return True


@refused("synchronous allreduce", "waited for the network")
def synchronous_all_reduce_and_a_fake_handle(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        dist.all_reduce(bucket.pack())
        pending.append((bucket, _Done()))


@refused("synchronous barrier")
def barrier_after_launching(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        pending.append((bucket, dist.all_reduce(bucket.pack(), async_op=True)))
        dist.barrier()


@refused("had not returned", "waiting for communication")
def watches_the_buffer_change(bucket, pending):
    """No question to the handle at all: it spins until the sum has overwritten the buffer."""
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        buffer = bucket.pack()
        before = buffer.clone()
        handle = dist.all_reduce(buffer, async_op=True)
        deadline = time.monotonic() + 10
        while torch.equal(buffer, before) and time.monotonic() < deadline:
            pass
        pending.append((bucket, handle))


# --- refused: the right work at the wrong time ------------------------------------------------

_HELD: list = []


@refused("more gradient(s) of later buckets", "not when later buckets")
def holds_every_bucket_until_the_last(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        _HELD.append(bucket)
        if sum(len(b.params) for b in _HELD) == 8:   # the model's 8 tensors: all are ready
            for b in _HELD:
                pending.append((b, dist.all_reduce(b.pack(), async_op=True)))
            _HELD.clear()


_PREVIOUS: list = []


@refused("more gradient(s) of later buckets")
def one_bucket_late(bucket, pending):
    """Starts each bucket's all-reduce when the next bucket is full (the last one at once)."""
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        if _PREVIOUS:
            b = _PREVIOUS.pop()
            pending.append((b, dist.all_reduce(b.pack(), async_op=True)))
        if len(bucket.params) == 2 and any(p.dim() == 2 and p.shape[1] == 16
                                           for p in bucket.params):   # the first layer's
            pending.append((bucket, dist.all_reduce(bucket.pack(), async_op=True)))
        else:
            _PREVIOUS.append(bucket)


class _Lazy:
    """A handle that starts its all-reduce only when the engine waits for it."""

    def __init__(self, buffer):
        self.buffer = buffer

    def wait(self):
        dist.all_reduce(self.buffer)
        return True


@refused("after backward() returned", "nothing overlapped")
def starts_when_waited_for(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        pending.append((bucket, _Lazy(bucket.pack())))


class _Joined:
    def __init__(self, thread, box):
        self.thread, self.box = thread, box

    def wait(self):
        self.thread.join()
        return self.box[0].wait()


_THREADS: list = []


@refused("nothing overlapped")
def starts_from_a_thread_later(bucket, pending):
    """Each bucket's all-reduce started 50 ms later by a thread (each after the one
    before, so that both ranks start them in the same order)."""
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        buffer, box = bucket.pack(), []
        before = _THREADS[-1] if _THREADS else None

        def later():
            time.sleep(0.05)
            if before is not None:
                before.join()
            box.append(dist.all_reduce(buffer, async_op=True))
        thread = threading.Thread(target=later)
        thread.start()
        _THREADS.append(thread)
        pending.append((bucket, _Joined(thread, box)))


@refused("different collectives")
def threads_that_race(bucket, pending):
    """Started from threads in whatever order they wake: the ranks disagree on the order."""
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        buffer, box = bucket.pack(), []
        size = len(bucket.params)   # rank 0 sends the big bucket last, rank 1 first
        delay = 0.01 * (size if dist.get_rank() == 0 else 6 - size)

        def later():
            time.sleep(delay)
            box.append(dist.all_reduce(buffer, async_op=True))
        thread = threading.Thread(target=later)
        thread.start()
        pending.append((bucket, _Joined(thread, box)))


# --- refused: no work, or the package's --------------------------------------------------------


@refused("package's own", "Write it yourself")
def the_package_hook(bucket, pending):
    from workbench.data_parallel.overlapped import launch_when_full

    launch_when_full(bucket, pending)


@refused("no all-reduce of a bucket's buffer", "never crossed ranks")
def no_communication(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        bucket.pack()
        pending.append((bucket, _Done()))


@refused("no all-reduce of a bucket's buffer", "on other tensors")
def all_reduces_a_copy(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        pending.append((bucket, dist.all_reduce(bucket.pack().clone(), async_op=True)))


@refused("different collectives", "no `if rank")
def only_rank_0_communicates(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params) and dist.get_rank() == 0:
        pending.append((bucket, dist.all_reduce(bucket.pack(), async_op=True)))


# --- refused: typical mistakes -----------------------------------------------------------------


@refused("differ from one process", "bucket.pack()")
def never_packs(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        pending.append((bucket, dist.all_reduce(bucket.buffer, async_op=True)))


@refused("before all its gradients")
def launches_on_the_first_gradient(bucket, pending):
    bucket.ready += 1
    if bucket.ready == 1:
        pending.append((bucket, dist.all_reduce(bucket.pack(), async_op=True)))


@refused("before all its gradients")
def two_where_the_bucket_size_belongs(bucket, pending):
    bucket.ready += 1
    if bucket.ready == 2:                 # a weight and a bias: not every bucket's size
        pending.append((bucket, dist.all_reduce(bucket.pack(), async_op=True)))


@refused("exactly once")
def launches_every_call_after_the_last(bucket, pending):
    """Counts, but starts again on a bucket it already started (and never resets)."""
    bucket.ready += 1
    if bucket.ready >= len(bucket.params):
        pending.append((bucket, dist.all_reduce(bucket.pack(), async_op=True)))
        pending.append((bucket, dist.all_reduce(bucket.pack(), async_op=True)))


def _engine():
    """The engine calling the hook, read from the frames above it."""
    import inspect

    frame = inspect.currentframe()
    while frame is not None and not hasattr(frame.f_locals.get("self"), "buckets"):
        frame = frame.f_back
    return frame.f_locals["self"]


@refused("more gradient(s) of later buckets")
def reads_the_engine_and_starts_all_at_the_end(bucket, pending):
    """Finds the engine's buckets in its callers' frames; starts nothing until all are full."""
    bucket.ready += 1
    sync = _engine()
    if all(b.ready == len(b.params) for b in sync.buckets):
        for b in sync.buckets:
            pending.append((b, dist.all_reduce(b.pack(), async_op=True)))


@refused("synchronous allreduce")
def one_blocking_message_at_the_end(bucket, pending):
    """Nothing until the last bucket is full, then one blocking all-reduce of them all."""
    bucket.ready += 1
    sync = _engine()
    if all(b.ready == len(b.params) for b in sync.buckets):
        buffers = [b.pack() for b in sync.buckets]
        flat = torch.cat(buffers)
        dist.all_reduce(flat)
        offset = 0
        for b, buffer in zip(sync.buckets, buffers, strict=True):
            buffer.copy_(flat[offset:offset + buffer.numel()])
            offset += buffer.numel()
            pending.append((b, _Done()))


@refused("more gradient(s) of later buckets")
def queued_for_the_end_of_backward(bucket, pending):
    """Each full bucket's all-reduce queued to start when autograd has finished."""
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        buffer = bucket.pack()

        def start():
            pending.append((bucket, dist.all_reduce(buffer, async_op=True)))
        torch.autograd.Variable._execution_engine.queue_callback(start)


_DECOYED: list = []


@refused("all-reduced 2 times in one step", "exactly once")
def a_decoy_on_time_and_the_real_one_at_the_end(bucket, pending):
    """On time: an all-reduce of the zeroed buffer (it would sum nothing); the real one when
    every bucket is full."""
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        bucket.buffer.zero_()
        dist.all_reduce(bucket.buffer, async_op=True)
        _DECOYED.append(bucket)
        if sum(len(b.params) for b in _DECOYED) == 8:
            for b in _DECOYED:
                pending.append((b, dist.all_reduce(b.pack(), async_op=True)))
            _DECOYED.clear()


@refused("all-reduced 2 times in one step")
def all_reduces_its_bucket_twice(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        buffer = bucket.pack()
        dist.all_reduce(buffer, async_op=True)
        pending.append((bucket, dist.all_reduce(buffer, async_op=True)))


@refused("changed a tensor after starting its all-reduce")
def starts_then_packs(bucket, pending):
    bucket.ready += 1
    if bucket.ready == len(bucket.params):
        handle = dist.all_reduce(bucket.buffer, async_op=True)
        bucket.pack()
        pending.append((bucket, handle))

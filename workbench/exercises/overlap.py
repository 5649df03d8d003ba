"""Exercise: write the hook that starts a bucket's all-reduce during the backward pass.

The student writes `launch(bucket, pending)`, which the overlapped engine
(workbench/data_parallel/overlapped.py) calls each time autograd finishes one of `bucket`'s
gradients: at the last one it starts the bucket's all-reduce without waiting and appends
`(bucket, handle)` to `pending`, on which the engine waits after `backward()` returns.

`check_launch_hook(launch)` runs it on 2 real torch ranks (`workbench.launch`, on warm ones
when `workbench.ranks(np=2, engine="torch", cpu_bind="none")` runs): SGD steps of a 4-layer
MLP whose gradients fill buckets of 4, 2 and 2 tensors. It measures with instruments of its
own, installed before the hook first runs: a post-accumulate-grad hook on every parameter,
registered before the engine's (when each gradient was ready), and the checker's network
(:mod:`workbench.exercises.network`) under every collective of torch's process group (when
each all-reduce started and on what; every question asked of a handle, synchronous
collective or barrier while backward() runs; a backward() held up by other means).

It passes a hook only if, on every rank and in every step, each bucket's all-reduce started
once, on the bucket's own buffer, after its last gradient and before the next gradient was
ready, nothing in backward() waited, the buffer was left alone once sent, the package's own
hook (`launch_when_full`) did not run, and the ranks end with the parameters of one process
with batch 2·b. Its message gives the measured times. The world size does not enter the
hook (the engine divides), so 2 ranks decide it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
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
from workbench.exercises.own_work import HINT as OWN_WORK_HINT

#: Sizes: a 16 → 32 → 32 → 32 → 4 MLP, 3 steps of batch 8 per rank, 1 KiB buckets (which
#: hold 4, 2 and 2 tensors).
FEATURES, WIDTH, CLASSES, BATCH, STEPS, LR, BUCKET_MB = 16, 32, 4, 8, 3, 0.1, 1 / 1024
ATOL = 1e-5
#: How long the network holds an all-reduce while backward() runs before it concludes that
#: backward() waits for it (a backward pass of this MLP takes a few milliseconds), s.
HOLD_S = 1.0
#: The package's own hooks and engines: the answer, not to be called by it.
PACKAGE_ANSWERS = ("workbench.data_parallel.overlapped", "workbench.data_parallel.bucketed",
                   "workbench.exercises.overlap:serial_params")


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


def run_on_rank(launch: Callable[..., Any]) -> dict[str, Any]:
    """What each rank runs: a few SGD steps with the student's hook, the instruments on."""
    import torch.distributed as dist

    from workbench.exercises.network import installed
    from workbench.exercises.own_work import Watch

    dist.init_process_group("gloo")
    watch = Watch(PACKAGE_ANSWERS)
    try:
        with installed(hold_s=HOLD_S) as net:
            result = _train(dist.get_rank(), dist.get_world_size(), watch.wrap(launch), net)
        return {**result, "used": watch.used}
    finally:
        dist.destroy_process_group()


def _train(rank: int, size: int, launch: Callable[..., Any], net: Any) -> dict[str, Any]:
    from workbench.data_parallel.overlapped import OverlappedSync

    torch.set_num_threads(1)
    model, (x, y) = make_model(), make_data(size)
    params = list(model.parameters())
    for i, p in enumerate(params):   # before the engine's hooks, so they run first
        p.register_post_accumulate_grad_hook(lambda _p, i=i: net.note("grad", param=i))
    sync = OverlappedSync(model, size, BUCKET_MB, launch=launch)
    index = {id(p): i for i, p in enumerate(params)}
    buckets = [[index[id(p)] for p in bucket.params] for bucket in sync.buckets]
    buffers = {bucket.buffer.data_ptr(): k for k, bucket in enumerate(sync.buckets)}
    opt = torch.optim.SGD(params, lr=LR)
    steps = []
    for step in range(STEPS):
        rows = slice((step * size + rank) * BATCH, (step * size + rank + 1) * BATCH)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x[rows]), y[rows])
        first = len(net.events)
        try:
            net.backward(True)
            try:
                loss.backward()
            finally:
                net.backward(False)
            sync.wait_for_gradients(opt)
        except Exception as exc:   # the student's mistake, reported as feedback
            return {"error": f"{type(exc).__name__}: {exc}", "step": step}
        opt.step()
        steps.append(_timeline(net.events[first:], buffers))
    want = serial_params(size)
    gap = max(float((p.detach() - w).abs().max()) for p, w in zip(params, want, strict=True))
    return {"gap": gap, "steps": steps, "buckets": buckets}


def _timeline(events: list[dict[str, Any]], buffers: dict[int, int]) -> list[dict[str, Any]]:
    """One step's events, times in ms from backward()'s start, each all-reduce named by
    the bucket whose buffer it carried (None: another tensor)."""
    t0 = events[0]["t"]
    out = []
    for e in events:
        item = {k: v for k, v in e.items() if k != "tensors"}
        item["ms"] = 1e3 * (e["t"] - t0)
        if e["kind"] == "start":
            item["bucket"] = next((buffers[p] for p, _ in e["tensors"] if p in buffers), None)
        out.append(item)
    return out


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
    """The verdict from what each rank measured (see `run_on_rank`)."""
    for r, result in enumerate(results):
        if "error" in result:
            return not_yet(f"on rank {r}, step {result['step']}: {result['error']}",
                           *_hints_for(result["error"]))
    for result in results:
        if result["used"]:
            return not_yet(f"your hook calls {', '.join(result['used'])}: the package's own "
                           "engine, whose launch hook this exercise asks you to write.",
                           OWN_WORK_HINT)
    for r, result in enumerate(results):
        for s, events in enumerate(result["steps"]):
            problem = step_problem(events, result["buckets"])
            if problem:
                return not_yet(f"rank {r}, step {s}: {problem[0]}", problem[1])
    gap = max(result["gap"] for result in results)
    if gap > ATOL:
        return not_yet(f"the parameters differ from one process with batch 2·b by {gap:.3g}.",
                       "The engine unpacks the bucket's own buffer: fill it with the bucket's "
                       "gradients (bucket.pack() copies them in and returns it) and all-reduce "
                       "that buffer, once.")
    return correct(f"on 2 real ranks, measured on rank 0 in the last step: "
                   f"{_measured(results[0]['steps'][-1], results[0]['buckets'])} Nothing in "
                   "backward() waited (the checker's network held every all-reduce until "
                   "backward() returned, and backward() never noticed), and the parameters "
                   f"match one process with batch 2·b (within {gap:.1g}).")


def step_problem(events: list[dict[str, Any]], buckets: list[list[int]],
                 ) -> tuple[str, str] | None:
    """(what went wrong, a hint) in one step's timeline, or None when it overlapped."""
    end = next(e["ms"] for e in events if e["kind"] == "returned")
    during = [e for e in events if e["ms"] <= end]
    blocking = next((e for e in during if e["kind"] == "start" and (
        e["sync"] or "barrier" in e["what"])), None)
    if blocking:
        return (f"while backward() ran, your hook made a synchronous {blocking['what']} (at "
                f"{blocking['ms']:.2f} ms): it returns only once every rank's data has "
                "arrived, so backward() waited for the network.", _FREE)
    waited = next((e for e in during if e["kind"] == "asked"), None)
    if waited:
        return (f"while backward() ran, your hook called {waited['what']} on a handle of "
                f"{waited['op']} (at {waited['ms']:.2f} ms; backward() returned at "
                f"{end:.2f} ms): backward() stood still while the gradients travelled, so "
                "nothing overlapped.", _FREE)
    twice = Counter(e["bucket"] for e in events
                    if e["kind"] == "start" and e.get("bucket") is not None).most_common(1)
    if twice and twice[0][1] > 1:
        return (f"bucket {twice[0][0]}'s buffer was all-reduced {twice[0][1]} times in one "
                "step: each bucket travels once.", "Start each bucket's all-reduce exactly "
                "once, in the call that brings its last gradient.")
    changed = next((e for e in events if e["kind"] == "changed"), None)
    if changed:
        return ("your hook changed a tensor after starting its all-reduce: the all-reduce "
                "may send it at any moment from its start, so it would have raced with "
                "your change.", "Fill the buffer first (bucket.pack()), then start its "
                "all-reduce, and leave it alone until the engine has waited for it.")
    held = next((e for e in events if e["kind"] == "held_up"), None)
    if held:
        return (f"backward() had not returned {HOLD_S:g} s after {held['op']} started: the "
                "checker's network delivers nothing before backward() returns, so your hook "
                "was waiting for communication (polling a buffer, sleeping, ...).", _FREE)
    starts = [e for e in events if e["kind"] == "start" and e.get("bucket") is not None]
    if not starts:
        others = sum(e["kind"] == "start" for e in events)
        return (f"no all-reduce of a bucket's buffer was started ({others} collective(s) on "
                "other tensors): the gradients never crossed ranks.",
                "The engine reads each bucket's own buffer after backward(): all-reduce "
                "that buffer, filled with the bucket's gradients.")
    return _late(events, buckets, end)


_FREE = ("Start the all-reduce and append its handle, then return: no wait(), no polling, "
         "no barrier, no synchronous collective in the hook. The engine waits on every "
         "handle after backward() has returned.")


def _late(events: list[dict[str, Any]], buckets: list[list[int]], end: float,
          ) -> tuple[str, str] | None:
    """Each bucket's all-reduce must start after its last gradient, before the next one."""
    order = [e for e in events if e["kind"] in ("grad", "start")]
    grads = [i for i, e in enumerate(order) if e["kind"] == "grad"]
    for k, params in enumerate(buckets):
        mine = [i for i in grads if order[i]["param"] in params]
        last = max(mine)
        start = next((i for i, e in enumerate(order) if e["kind"] == "start"
                      and e.get("bucket") == k), None)
        if start is None or order[start]["ms"] > end:
            when = "was never started" if start is None else \
                f"started only at {order[start]['ms']:.2f} ms, after backward() returned"
            return (f"bucket {k}'s last gradient was ready at {order[last]['ms']:.2f} ms, "
                    f"backward() returned at {end:.2f} ms, and its all-reduce {when}: "
                    "nothing overlapped.", "Start the all-reduce inside the hook, in the call "
                    "that brings the bucket's last gradient.")
        if start < last:
            return (f"bucket {k}'s all-reduce started at {order[start]['ms']:.2f} ms, before "
                    f"its last gradient ({order[last]['ms']:.2f} ms): it carried gradients "
                    "that did not exist yet.", "Count the bucket's gradients as they come and "
                    "start its all-reduce once all of them are in.")
        between = [i for i in grads if last < i < start]
        if between:
            return (f"bucket {k}'s last gradient was ready at {order[last]['ms']:.2f} ms, but "
                    f"its all-reduce started only at {order[start]['ms']:.2f} ms, after "
                    f"{len(between)} more gradient(s) of later buckets: it waited for them "
                    "instead of travelling while they were computed.",
                    "Start each bucket's all-reduce in the call that brings that bucket's "
                    "last gradient, not when later buckets (or all of them) are full.")
    return None


def _measured(events: list[dict[str, Any]], buckets: list[list[int]]) -> str:
    """The times behind a pass, as a sentence per bucket."""
    end = next(e["ms"] for e in events if e["kind"] == "returned")
    grads = [e for e in events if e["kind"] == "grad"]
    parts = []
    for k, params in enumerate(buckets):
        full = max(e["ms"] for e in grads if e["param"] in params)
        start = next(e["ms"] for e in events if e["kind"] == "start" and e.get("bucket") == k)
        later = sum(e["ms"] > start for e in grads)
        parts.append(f"bucket {k} ({len(params)} tensors) was full at {full:.2f} ms and its "
                     f"all-reduce started at {start:.2f} ms, with {later} gradient(s) still "
                     "to come")
    return f"{'; '.join(parts)}; backward() returned at {end:.2f} ms."


def _hints_for(error: str) -> list[str]:
    if "different collectives" in error:
        return ["Every rank runs the same hook on the same buckets: start the same "
                "all-reduces on every rank, with no `if rank == ...`."]
    if "all-reduces were started" in error:
        return ["Count the bucket's ready gradients and start the all-reduce exactly once, "
                "in the call that brings its last one."]
    if "'NoneType'" in error:
        return ["A gradient was still None: the bucket was packed before all its gradients "
                "were ready.",
                "The engine needs a handle per bucket: an all-reduce started with "
                "async_op=True returns one; without async_op it returns None."]
    return ["Read the error, fix that line of your function, and run the check again."]


"""Ring allreduce lab: check the from-scratch ring against the libraries, and time it.

:func:`run_ring_lab` starts ``np`` real processes (gloo over local TCP) that

1. check that :func:`~workbench.synchronization.ring_allreduce.dist_ring_allreduce` gives the
   same sums as ``torch.distributed.all_reduce``, for every requested vector length (odd
   lengths such as 7 or 1001 exercise the uneven chunks);
2. time both, in seconds per allreduce (the slowest rank counts: an allreduce is done only
   when every worker has the result);
3. measure the point-to-point latency α and inverse bandwidth β with a ping-pong between
   ranks 0 and 1, and predict the ring's time with the α–β model
   (:func:`workbench.scaling.costmodel.ring_allreduce_time`, Patarasuk & Yuan 2009).

The comparison with Horovod's ``hvd.allreduce(op=hvd.Sum)`` runs as a Horovod job
(:func:`check_against_horovod`, rank module :mod:`workbench.synchronization.ring_rank`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from workbench.launch.workers import run_workers
from workbench.scaling.costmodel import ring_allreduce_time
from workbench.synchronization.ring_allreduce import bytes_sent_per_worker, dist_ring_allreduce

#: Message sizes (bytes) of the ping-pong that measures α and β.
PINGPONG_BYTES = (4, 4096, 65536, 1 << 20)


def compare_with_allreduce(n: int, seed: int = 0) -> dict[str, Any]:
    """In a running process group: ring vs ``dist.all_reduce`` on ``n`` random float64 values.

    float64 keeps the rounding differences (the two algorithms add in different orders) near
    1e-15, so any real mistake stands out. A second, integer-valued vector must match exactly.
    """
    rank = dist.get_rank()
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed + rank), dtype=torch.float64)
    ours, ref = dist_ring_allreduce(x.clone()), x.clone()
    dist.all_reduce(ref)
    ints = torch.arange(n, dtype=torch.float64) * (rank + 1)
    ints_ours, ints_ref = dist_ring_allreduce(ints.clone()), ints.clone()
    dist.all_reduce(ints_ref)
    return {"n": n, "max_abs_diff": float((ours - ref).abs().max()) if n else 0.0,
            "exact_integers": bool(torch.equal(ints_ours, ints_ref))}


def _time_op(op, n: int, repeats: int) -> float:
    """Median over ``repeats`` of the slowest rank's seconds for one call of ``op``."""
    x = torch.ones(n)
    op(x.clone())  # warm-up: the first message on each link sets up the connection
    times = []
    for _ in range(repeats):
        buf = x.clone()
        dist.barrier()
        start = time.perf_counter()
        op(buf)
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        times.append(float(elapsed))
    return statistics.median(times)


def _pingpong(repeats: int) -> list[float]:
    """One-way seconds per message size in :data:`PINGPONG_BYTES` (half a round trip, 0↔1)."""
    rank, out = dist.get_rank(), []
    for n_bytes in PINGPONG_BYTES:
        buf = torch.zeros(n_bytes // 4)
        trips = []
        for i in range(repeats + 1):
            dist.barrier()
            start = time.perf_counter()
            if rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
            elif rank == 1:
                dist.recv(buf, 0)
                dist.send(buf, 0)
            if i:  # the first round trip is a warm-up
                trips.append((time.perf_counter() - start) / 2)
        out.append(statistics.median(trips))
    return out


def _lab_worker(rank: int, size: int, sizes: Sequence[int], repeats: int, seed: int) -> dict:
    """Body of each process of :func:`run_ring_lab`; rank 0's result is the report."""
    checks = [compare_with_allreduce(n, seed) for n in sizes]
    timings = [{"n": n, "ring_s": _time_op(dist_ring_allreduce, n, repeats),
                "library_s": _time_op(dist.all_reduce, n, repeats)} for n in sizes]
    pingpong = _pingpong(repeats)
    return {"rank": rank, "checks": checks, "timings": timings, "pingpong_s": pingpong}


def fit_point_to_point(sizes_bytes: Sequence[float],
                       times_s: Sequence[float]) -> tuple[float, float]:
    """(α seconds, β seconds/byte) of one message, t = α + n·β, fitted on relative error.

    Weights 1/t make the small messages (which decide α) count as much as the large ones.
    """
    beta, alpha = np.polyfit(np.asarray(sizes_bytes, float), np.asarray(times_s, float), 1,
                             w=1.0 / np.asarray(times_s, float))
    return max(float(alpha), 0.0), max(float(beta), 0.0)


def run_ring_lab(np_: int = 2, sizes: Sequence[int] = (7, 1001, 65536, 1 << 20),
                 repeats: int = 5, seed: int = 0, runs_dir: str = "runs",
                 timeout: float = 180.0) -> dict[str, Any]:
    """Check and time the from-scratch ring allreduce with ``np_`` processes.

    Args:
        np_: number of processes (≥ 2).
        sizes: vector lengths in elements (float32 for the timings, float64 for the checks).
        repeats: timed repetitions per size (the median is reported).

    Returns:
        ``{"np", "checks": [{"n", "max_abs_diff", "exact_integers"}], "alpha_s", "beta_s_per_byte",
        "rows": [{"n", "bytes", "ring_s", "library_s", "model_s", "bytes_sent_per_worker"}]}``.
        ``model_s`` is the α–β prediction 2(p−1)·α + 2·(p−1)/p·n·β from the ping-pong fit.
    """
    if np_ < 2:
        raise ValueError(f"a ring needs at least 2 processes, got np={np_}")
    if not sizes or min(sizes) < 1:
        raise ValueError(f"sizes must be positive element counts, got {list(sizes)}")
    results = run_workers(_lab_worker, np_, (list(sizes), repeats, seed), name="ring-lab",
                          runs_dir=runs_dir, timeout=timeout,
                          settings={"sizes": list(sizes), "repeats": repeats, "seed": seed})
    report = results[0]
    alpha, beta = fit_point_to_point(PINGPONG_BYTES, report["pingpong_s"])
    rows = []
    for t in report["timings"]:
        n_bytes = 4 * t["n"]
        rows.append({**t, "bytes": n_bytes,
                     "model_s": ring_allreduce_time(n_bytes, np_, alpha, beta),
                     "bytes_sent_per_worker": bytes_sent_per_worker(t["n"], np_)})
    checks = [{"n": c["n"],  # worst over all ranks
               "max_abs_diff": max(r["checks"][i]["max_abs_diff"] for r in results),
               "exact_integers": all(r["checks"][i]["exact_integers"] for r in results)}
              for i, c in enumerate(report["checks"])]
    return {"np": np_, "checks": checks, "alpha_s": alpha, "beta_s_per_byte": beta,
            "pingpong_bytes": list(PINGPONG_BYTES), "pingpong_s": report["pingpong_s"],
            "rows": rows}


def check_against_horovod(np_: int = 2, sizes: Sequence[int] = (7, 1001), *,
                          runs_dir: str = "runs", timeout: float = 300.0) -> dict[str, Any]:
    """Compare the from-scratch ring with ``hvd.allreduce(op=hvd.Sum)`` in a Horovod job.

    The parent hosts the ``torch.distributed`` rendezvous on a free port and passes it to
    the ranks (:mod:`workbench.synchronization.ring_rank`), which also run Horovod. Returns
    the rank module's result: ``{"np", "rows": [{"n", "max_abs_diff_vs_torch_distributed",
    "max_abs_diff_vs_horovod"}], "run_id"}``. Differences of about 1e-15 are rounding
    (float64 sums in a different order); a wrong ring gives differences of order 1.
    """
    import datetime

    from workbench.launch import start_module

    if np_ < 2:
        raise ValueError(f"a ring needs at least 2 processes, got np={np_}")
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout))
    job = start_module("horovod", np=np_, module="workbench.synchronization.ring_rank",
                       args=["--port", str(store.port),
                             "--sizes", ",".join(str(int(n)) for n in sizes)],
                       runs_dir=runs_dir, name="ring-check")
    try:
        status = job.wait(timeout=timeout)
    finally:
        if not job.done:
            job.stop()
        del store
    result = job.result()
    if status != "succeeded" or result is None:
        raise RuntimeError(f"the Horovod ring check {job.status}; see the logs in "
                           f"{job.run_dir / 'logs'}")
    return {**result, "run_id": job.run_id}

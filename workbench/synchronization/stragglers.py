"""Stragglers in synchronous training: one slow rank makes every rank wait.

In synchronous data parallelism (Horovod, DDP) a step ends with an allreduce of the gradients,
and an allreduce cannot finish before the *last* rank has contributed. So if one rank is
slower — a busier machine, a slower GPU, a noisy neighbour — every step of *every* rank takes
as long as that rank's step: the fast ranks spend the difference waiting inside the
allreduce, which the workbench records as ``sync_s``.

:func:`run_stragglers` shows this with two real Horovod jobs, identical except that one
rank sleeps ``delay`` seconds per step (``JobConfig.straggler_delay`` /
``straggler_rank``), and reads the per-rank ``compute_s``, ``sync_s`` and ``step_time_s`` of
every step from the run's metrics files (``metrics/rank<k>.jsonl``).

**What backup workers would buy** (Chen, Pan, Monga, Bengio & Jozefowicz, "Revisiting
Distributed Synchronous SGD", 2016, arXiv:1604.00981): run N + b workers and, at each step,
keep the first N gradients to arrive, dropping the b slowest. Two measured demonstrations:

1. *From the Horovod runs*: a synchronous step takes (the slowest rank's compute) + (the
   allreduce itself). The allreduce's own cost is what the *last* rank to arrive spends in it,
   i.e. the smallest ``sync_s`` of the step. Dropping the k slowest gradients would make the
   step (the (k+1)-th slowest compute) + (that cost). The estimate for k = 0 is checked
   against the measured step time.
2. *Really run* (optional): the parameter-server lab in "first N of N + b" mode
   (:func:`workbench.synchronization.async_ps.run_parameter_server` with ``mode="backup"``)
   against plain synchronous mode, with the same straggler.
"""

from __future__ import annotations

import statistics
from typing import Any

#: Steps at the start of a run left out of the averages: they include one-off set-up costs.
WARMUP_STEPS = 2


class StragglerError(RuntimeError):
    """A job of the straggler lab failed or did not finish; the message says where to look."""


def _run_job(delay: float, np_: int, straggler_rank: int, steps: int, batch_size: int,
             engine: str, runs_dir: str, timeout: float) -> tuple[str, list[dict]]:
    """Run one training job; return its run id and its "step" metrics."""
    import workbench
    from workbench.config import JobConfig

    cfg = JobConfig(engine=engine, np=np_, model="mlp", dataset="digits", epochs=1,
                    batch_size=batch_size, max_steps=steps, threads_per_rank=1,
                    straggler_delay=delay, straggler_rank=straggler_rank, runs_dir=runs_dir,
                    name=f"stragglers-{'delay' if delay else 'base'}")
    job = workbench.start(cfg)
    status = job.wait(timeout=timeout)
    if not job.done:
        job.stop()
        raise StragglerError(f"the {engine} job took longer than {timeout:g} s and was "
                             f"stopped; logs in {job.run_dir / 'logs'}")
    if status != "succeeded":
        raise StragglerError(f"the {engine} job {status}; logs in {job.run_dir / 'logs'}")
    return job.run_id, [m for m in job.metrics() if m.get("kind") == "step"]


def step_table(step_metrics: list[dict]) -> list[list[dict]]:
    """Group step records by step number: one list (indexed by rank) per step.

    Other records of a run's metrics (epochs, events) are skipped, so a job's whole
    `job.metrics()` can be passed in.
    """
    by_step: dict[int, dict[int, dict]] = {}
    for m in step_metrics:
        if m.get("kind", "step") != "step":
            continue
        by_step.setdefault(int(m["step"]), {})[int(m["rank"])] = m
    ranks = max(len(v) for v in by_step.values())
    return [[v[r] for r in range(ranks)] for _, v in sorted(by_step.items()) if len(v) == ranks]


def per_rank_means(steps: list[list[dict]]) -> list[dict[str, float]]:
    """Mean ``step_time_s``, ``compute_s`` and ``sync_s`` of each rank, warm-up excluded."""
    used = steps[WARMUP_STEPS:] if len(steps) > WARMUP_STEPS else steps
    return [{"rank": r,
             **{k: statistics.fmean(step[r][k] for step in used)
                for k in ("step_time_s", "compute_s", "sync_s")}}
            for r in range(len(used[0]))]


def dropped_step_times(steps: list[list[dict]]) -> list[dict[str, float]]:
    """Estimated step time if the k slowest gradients were dropped, k = 0 .. ranks−1.

    Per step: sort the ranks' compute times; the step would end when the (k+1)-th slowest
    rank has computed, plus the allreduce's own cost (the smallest ``sync_s`` of the step:
    the last rank to arrive hardly waits). Means over steps, warm-up excluded.
    """
    used = steps[WARMUP_STEPS:] if len(steps) > WARMUP_STEPS else steps
    ranks = len(used[0])
    rows = []
    for k in range(ranks):
        estimates = []
        for step in used:
            compute = sorted((m["compute_s"] for m in step), reverse=True)
            estimates.append(compute[k] + min(m["sync_s"] for m in step))
        rows.append({"dropped": k, "gradients_used": ranks - k,
                     "step_time_s": statistics.fmean(estimates)})
    return rows


def summarize_run(step_metrics: list[dict]) -> dict[str, Any]:
    """Per-rank means, the measured step time and the drop-the-slowest estimates of a run."""
    steps = step_table(step_metrics)
    if not steps:
        raise StragglerError("the job wrote no complete steps: raise --steps")
    used = steps[WARMUP_STEPS:] if len(steps) > WARMUP_STEPS else steps
    return {"steps": len(steps), "per_rank": per_rank_means(steps),
            "step_time_s": statistics.fmean(max(m["step_time_s"] for m in s) for s in used),
            "if_dropped": dropped_step_times(steps)}


def run_stragglers(delay: float = 0.05, np: int = 2, *, straggler_rank: int = 1,
                   steps: int = 20, batch_size: int = 32, engine: str = "horovod",
                   runs_dir: str = "runs", backup_ps: bool = True,
                   timeout: float = 300.0) -> dict[str, Any]:
    """Measure what one slow rank costs a synchronous job, and what dropping it would buy.

    Args:
        delay: seconds the straggler sleeps per step.
        np: ranks of the job (≥ 2).
        straggler_rank: which rank is slow.
        steps: training steps per job.
        engine: ``"horovod"`` (default) or ``"torch"`` (DDP): both synchronize every step.
        backup_ps: also run the parameter-server lab in sync and "first N of N+1" modes.

    Returns:
        ``{"delay", "np", "straggler_rank", "baseline": run, "straggler": run, "backup_ps"}``
        where each run has ``run_id``, ``step_time_s`` (mean over steps of the slowest rank's
        step), ``per_rank`` (``step_time_s``, ``compute_s``, ``sync_s`` means) and
        ``if_dropped`` (estimated step time when the k slowest gradients are dropped).
    """
    if np < 2:
        raise ValueError(f"a straggler needs company: use np ≥ 2, got {np}")
    if delay <= 0:
        raise ValueError(f"delay is the straggler's extra seconds per step, > 0; got {delay}")
    if not 0 <= straggler_rank < np:
        raise ValueError(f"straggler_rank must be in 0..{np - 1}, got {straggler_rank}")
    report: dict[str, Any] = {"delay": delay, "np": np, "straggler_rank": straggler_rank,
                              "engine": engine}
    for label, d in (("baseline", 0.0), ("straggler", delay)):
        run_id, metrics = _run_job(d, np, straggler_rank, steps, batch_size, engine,
                                   runs_dir, timeout)
        report[label] = {"run_id": run_id, **summarize_run(metrics)}
    if backup_ps:
        report["backup_ps"] = backup_workers_demo(delay, workers=np, runs_dir=runs_dir,
                                                  timeout=timeout)
    return report


def backup_workers_demo(delay: float, workers: int = 2, epochs: int = 1,
                        runs_dir: str = "runs", timeout: float = 300.0) -> dict[str, Any]:
    """Parameter server with a straggler: plain sync vs keeping the first N of N+1 gradients."""
    from workbench.synchronization.async_ps import run_parameter_server

    out = {}
    for mode, backups in (("sync", 0), ("backup", 1)):
        r = run_parameter_server(mode, workers=workers, epochs=epochs, straggler_delay=delay,
                                 backup_workers=backups, runs_dir=runs_dir, timeout=timeout)
        out[mode] = {k: r[k] for k in ("time_s", "final_loss", "final_accuracy", "updates",
                                       "gradients_dropped")}
        out[mode]["time_per_update_s"] = r["time_s"] / max(1, r["updates"])
    return out

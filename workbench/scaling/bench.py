"""The allreduce benchmark: time real allreduces, report nccl-tests bandwidths, fit α and β.

``run_allreduce_bench("horovod", np=2, sizes=[4096, 1 << 20])`` launches
:mod:`workbench.scaling.allreduce_rank` on ``np`` real ranks through the job launcher, waits,
and returns

* one row per size: ``size_bytes, time_s, algbw_GBps, busbw_GBps`` (GB = 10⁹ bytes, as
  nccl-tests prints), with busbw = algbw × 2(p−1)/p (nccl-tests doc/PERFORMANCE.md);
* ``alpha_s`` and ``beta_s_per_byte`` of the ring model 2(p−1)α + 2(p−1)/p·n·β fitted to the
  times (:func:`workbench.scaling.costmodel.fit_alpha_beta`).

Those two numbers are what :mod:`workbench.scaling.simulate` needs to predict this machine.
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.scaling import costmodel

#: The rank module every benchmark rank runs.
RANK_MODULE = "workbench.scaling.allreduce_rank"


class BenchError(RuntimeError):
    """The benchmark job did not finish; the message says why and where the logs are."""


def bench_rows(result_rows: Sequence[dict], p: int) -> list[dict]:
    """Add algbw and busbw (GB/s, 10⁹ bytes per second) to the rank's timing rows."""
    rows = []
    for r in result_rows:
        n, t = r["size_bytes"], r["time_s"]
        rows.append({"size_bytes": n, "time_s": t,
                     "algbw_GBps": costmodel.algbw(n, t) / 1e9,
                     "busbw_GBps": costmodel.busbw(n, t, p) / 1e9 if p > 1 else 0.0,
                     "rounds": r.get("rounds")})
    return rows


def summarize(result: dict) -> dict:
    """Rows with bandwidths, plus the fitted α and β (None when they cannot be fitted)."""
    p = int(result["np"])
    rows = bench_rows(result["rows"], p)
    out = {"engine": result.get("engine"), "np": p, "rows": rows,
           "device": result.get("device", "cpu"),
           "alpha_s": None, "beta_s_per_byte": None}
    sizes = [r["size_bytes"] for r in rows]
    if p > 1 and len(set(sizes)) >= 2:
        fit = costmodel.fit_alpha_beta(sizes, [r["time_s"] for r in rows], p, "ring")
        out["alpha_s"], out["beta_s_per_byte"] = fit.alpha_s, fit.beta_s_per_byte
    return out


def run_allreduce_bench(engine: str, np: int, sizes: Sequence[int], runs_dir: str = "runs",
                        budget_s: float = 0.3, timeout_s: float = 300.0,
                        threads_per_rank: int = 1, blocking: bool = False,
                        device: str = "cpu") -> dict:
    """Run the benchmark as a real job and return :func:`summarize` of its result.

    By default each size is timed as a stream of back-to-back allreduces, as nccl-tests does;
    ``blocking=True`` waits for each call before starting the next (see allreduce_rank).
    ``device="cuda"`` times NCCL between the GPUs (one per rank; checked before launch).
    Raises ``workbench.config.ConfigError`` for bad settings and :class:`BenchError` when the
    job fails or takes longer than ``timeout_s`` seconds (its processes are stopped).
    """
    from workbench.launch import start_module

    job = start_module(engine, np=np, module=RANK_MODULE, runs_dir=runs_dir,
                       name=f"bench-{engine}", threads_per_rank=threads_per_rank, device=device,
                       args=["--sizes", ",".join(str(int(n)) for n in sizes),
                             "--budget-s", str(budget_s)] + (["--blocking"] if blocking else []))
    status = job.wait(timeout=timeout_s)
    if not job.done:
        job.stop()
        raise BenchError(f"allreduce benchmark took longer than {timeout_s:.0f} s and was "
                         f"stopped; logs in {job.run_dir / 'logs'}")
    result = job.result()
    if status != "succeeded" or result is None:
        raise BenchError(f"allreduce benchmark {status}: {_failure_text(job)} "
                         f"(logs in {job.run_dir / 'logs'})")
    out = summarize(result)
    out["run_id"] = job.run_id
    return out


def _failure_text(job) -> str:
    """The failure details summary.json gives, in one line."""
    summary = job.summary or {}
    failure = summary.get("failure") or summary.get("error") or ""
    if isinstance(failure, dict):
        failure = failure.get("error") or failure.get("message") or str(failure)
    return str(failure) or "no result was written"

"""How live is the training panel? Two figures, measured in a real Jupyter kernel.

(a) **Chart lag**: seconds from the moment a rank writes a metrics line to the moment that line
    is in the chart's ColumnDataSource (and its patch has been sent to the page). Target: 0.5 s.
(b) **Widget latency**: seconds from the moment a button click is sent to the kernel to the
    moment its callback runs, while a job runs and the panel refreshes. Target: 0.2 s.

Set-up: a kernel is started with jupyter_client; in it, a TrainingPanel follows a job whose
ranks are :mod:`workbench.ui.metrics_emitter` (they write step lines at a fixed rate and stamp
each with the wall-clock time it was written). From outside, this script sends button clicks
to the kernel over the shell channel, exactly as JupyterLab does, and then reads back when the
kernel saw them and when each refresh put lines into the chart.

    python benchmarks/ui_latency.py                 # 2 ranks x 50 lines/s for 10 s
    python benchmarks/ui_latency.py --rate 200 --seconds 20 --engine serial --np 1
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from workbench.records import MetricsReader

KERNEL_SETUP = """
import json, time
import ipywidgets as widgets
from workbench.launch import start_module
from workbench.ui import TrainingPanel

panel = TrainingPanel(runs_dir={runs!r}, engine={engine!r}, np={np}, refresh_s={refresh})
seen = []                              # (wall time after a refresh, rows in the rank-0 chart)
_refresh = panel.refresh
def _timed_refresh():
    n = _refresh()
    seen.append((time.time(), len(panel.sources["rank0"].data["step"])))
    return n
panel.refresh = _timed_refresh
clicks = []                            # wall time at which each click's callback ran
probe = widgets.Button(description="probe")
probe.on_click(lambda _b: clicks.append(time.time()))
job = start_module({engine!r}, np={np}, module="workbench.ui.metrics_emitter",
                   args=["--rate", "{rate}", "--seconds", "{seconds}"], runs_dir={runs!r},
                   name="uibench", threads_per_rank=1)
panel.watch(job)
print(json.dumps({{"probe": probe.model_id, "run_dir": str(job.run_dir)}}))
"""

KERNEL_REPORT = """
print(json.dumps({"seen": seen, "clicks": clicks, "status": job.status,
                  "rows": len(panel.sources["rank0"].data["step"])}))
panel.close()
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Measure the live panel's lag and responsiveness.")
    p.add_argument("--engine", default="horovod", choices=["horovod", "torch", "serial"])
    p.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--rate", type=float, default=50.0,
                   help="step lines per second per rank (default 50)")
    p.add_argument("--seconds", type=float, default=10.0, help="emitting time (default 10)")
    p.add_argument("--refresh", type=float, default=0.25, help="panel refresh period (s)")
    p.add_argument("--click-every", type=float, default=0.2, help="seconds between clicks")
    return p.parse_args(argv)


def run_in_kernel(kc, code: str, timeout: float = 120) -> str:
    """Execute ``code`` in the kernel and return what it printed; raise on an error."""
    out: list[str] = []
    errors: list[str] = []

    def hook(msg) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            errors.append("\n".join(msg["content"]["traceback"]))

    kc.execute_interactive(code, output_hook=hook, timeout=timeout)
    if errors:
        raise RuntimeError(errors[0])
    return "".join(out)


def click(kc, model_id: str) -> None:
    """Send the message a browser sends when a button is clicked."""
    msg = kc.session.msg("comm_msg", {"comm_id": model_id, "data": {
        "method": "custom", "content": {"event": "click"}}})
    kc.shell_channel.send(msg)


def chart_lags(run_dir: Path, seen: list[list[float]]) -> list[float]:
    """Seconds between writing each rank-0 step line and the refresh that charted it."""
    rows = MetricsReader(run_dir).all()
    walls = [r["wall"] for r in rows if r.get("kind") == "step" and r["rank"] == 0]
    counts = [n for _, n in seen]
    lags = []
    for i, wall in enumerate(walls):
        k = bisect.bisect_right(counts, i)          # first refresh with more than i rows
        if k < len(seen):
            lags.append(seen[k][0] - wall)
    return lags


def describe(values: list[float]) -> str:
    """mean / p95 / max in milliseconds."""
    if not values:
        return "no samples"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (f"mean {1000 * statistics.fmean(values):.0f} ms, p95 {1000 * p95:.0f} ms, "
            f"max {1000 * ordered[-1]:.0f} ms (n={len(values)})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from jupyter_client.manager import start_new_kernel

    work = Path(tempfile.mkdtemp(prefix="ui-latency-"))
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(work))
    try:
        setup = KERNEL_SETUP.format(runs=str(work / "runs"), engine=args.engine, np=args.np,
                                    refresh=args.refresh, rate=args.rate, seconds=args.seconds)
        info = json.loads(run_in_kernel(kc, setup).strip().splitlines()[-1])
        run_dir = Path(info["run_dir"])
        sent: list[float] = []
        deadline = time.monotonic() + args.seconds + 180
        while not (run_dir / "summary.json").exists() and time.monotonic() < deadline:
            sent.append(time.time())
            click(kc, info["probe"])
            time.sleep(args.click_every)
        time.sleep(1.0)                              # let the last refresh happen
        report = json.loads(run_in_kernel(kc, KERNEL_REPORT).strip().splitlines()[-1])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)

    lags = chart_lags(run_dir, report["seen"])
    handled = report["clicks"]
    click_lat = [h - s for s, h in zip(sent, handled, strict=False)]
    lines = sum(1 for r in MetricsReader(run_dir).all() if r.get("kind") == "step")
    print(f"job: {args.engine}, {args.np} rank(s) x {args.rate:g} step lines/s for "
          f"{args.seconds:g} s = {lines} lines ({args.np * args.rate:g} lines/s); "
          f"status {report['status']}; panel refresh every {args.refresh:g} s")
    print(f"(a) chart lag behind the metrics files: {describe(lags)}  [target <= 500 ms]")
    print(f"(b) button click -> callback while the job runs: {describe(click_lat)}; "
          f"{len(handled)} of {len(sent)} clicks handled  [target <= 200 ms]")
    ok = (report["status"] == "succeeded" and lags and max(lags) <= 0.5
          and click_lat and max(click_lat) <= 0.2 and len(handled) == len(sent))
    print("result:", "within targets" if ok else "OUTSIDE TARGETS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

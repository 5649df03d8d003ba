"""Whole-job cost: a `workbench run` next to the same work written by hand, side by side.

Compares, as whole processes from launch to exit,

    workbench run --engine horovod --np 2 --preset compute-bound --epochs 3
    horovodrun -np 2 --gloo python benchmarks/baselines/minimal_horovod_loop.py compute-bound 3

and prints ratios of medians over interleaved rounds (targets in brackets):

  wall time                         workbench / hand-written   [<= 1.10]
  (also the median of each round's own ratio, as the two commands of a round run back to back)
  peak RSS of the largest process   workbench / hand-written   [<= 1.25]

Peak RSS is each process's high-water mark (VmHWM in /proc/<pid>/status), sampled every
50 ms over the whole process tree, so a process's peak is caught even if it ends between
samples. The rounds alternate which command goes first, because the machine is shared and
its load drifts. Usage: .venv/bin/python benchmarks/job_cost.py [--rounds 5] [--epochs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent


def peak_rss_mb(pid: int) -> float | None:
    """A process's peak resident memory so far, in MB (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, largest process's peak RSS in MB, name of that process) of `cmd`."""
    peaks: dict[int, tuple[float, str]] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            tree = []
        for p in tree:
            rss = peak_rss_mb(p.pid)
            if rss is not None and rss > peaks.get(p.pid, (0.0, ""))[0]:
                try:
                    name = " ".join(p.cmdline()[:4])
                except psutil.Error:
                    name = "?"
                peaks[p.pid] = (rss, name)
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr.read().decode()[-2000:]}")
    rss, name = max(peaks.values(), default=(0.0, "?"))
    return wall, rss, name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--preset", default="compute-bound")
    args = parser.parse_args()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    results: dict[str, list[tuple[float, float, str]]] = {"workbench": [], "by hand": []}
    with tempfile.TemporaryDirectory() as runs:
        commands = {
            "workbench": [str(BIN / "workbench"), "run", "--engine", "horovod", "--np", "2",
                          "--preset", args.preset, "--epochs", str(args.epochs),
                          "--runs-dir", runs, "--json"],
            "by hand": [str(BIN / "horovodrun"), "-np", "2", "--gloo", sys.executable,
                        str(HERE / "baselines" / "minimal_horovod_loop.py"), args.preset,
                        str(args.epochs)],
        }
        for i in range(args.rounds):
            order = list(commands) if i % 2 == 0 else list(reversed(commands))
            for name in order:
                results[name].append(measure(commands[name], env))
                wall, rss, who = results[name][-1]
                print(f"round {i + 1}: {name:<9} {wall:6.2f} s  peak RSS {rss:7.1f} MB "
                      f"({who})", flush=True)
    load = os.getloadavg()[0]
    wall = {k: statistics.median(w for w, _, _ in v) for k, v in results.items()}
    rss = {k: statistics.median(r for _, r, _ in v) for k, v in results.items()}
    print(f"medians of {args.rounds} interleaved rounds, load average {load:.1f} on "
          f"{os.cpu_count()} cores:")
    paired = [w / h for (w, _, _), (h, _, _) in zip(results["workbench"], results["by hand"],
                                                    strict=True)]
    print(f"  wall time: workbench {wall['workbench']:.2f} s, by hand {wall['by hand']:.2f} s"
          f": ratio {wall['workbench'] / wall['by hand']:.3f}  [target <= 1.10]")
    # The two commands of one round run back to back, under about the same load; the median
    # of the rounds' ratios is steadier than the ratio of medians when the load drifts.
    print(f"  wall time, round by round: {', '.join(f'{r:.3f}' for r in paired)}; median "
          f"{statistics.median(paired):.3f}  [target <= 1.10]")
    print(f"  peak RSS of the largest process: workbench {rss['workbench']:.0f} MB, by hand "
          f"{rss['by hand']:.0f} MB: ratio {rss['workbench'] / rss['by hand']:.3f}  "
          "[target <= 1.25]")

if __name__ == "__main__":
    main()

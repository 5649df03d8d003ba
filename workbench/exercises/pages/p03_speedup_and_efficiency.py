"""Exercise 3: speedup and efficiency from a timing table."""

from workbench.notebooks import code, function_task, md

NAME = "03_speedup_and_efficiency.ipynb"

CELLS = [
    md(r"""
# Exercise 3: speedup and efficiency from a timing table

**Goals.** After this exercise you can
- compute the speedup $S(p) = T_1 / T_p$ and the efficiency $E(p) = S(p)/p$,
- read a scaling table and say how well a job scales,
- use the Karp–Flatt metric to tell serial code from growing overhead.

**Time:** about 15 minutes.
"""),
    md(r"""
## Background

The same epoch was timed with 1, 2, 4 and 8 workers. Speed depends on the platform (the
cluster, its network, the framework), unlike accuracy, so we measure it:

- **speedup** $S(p) = T_1 / T_p$: how many times faster than one worker;
- **efficiency** $E(p) = S(p) / p$: the share of the workers' time that does useful work;
- **scalability**: how $E(p)$ changes as $p$ grows.
"""),
    code(r"""
from workbench.exercises import scaling as ex

print(ex.format_table(ex.TIMES_S))
"""),
    md(r"""
## Your task

Write `scaling_table(times)`: given `{p: seconds}`, return `{p: (speedup, efficiency)}` for
every row, including $p = 1$.
"""),
    function_task(r'''
def scaling_table(times):
    """times: {workers: seconds}. Return {workers: (speedup, efficiency)}."""
    t1 = times[1]
    table = {}
    for p, tp in times.items():
        speedup = t1 / tp  # always against one worker: old time over new time
        table[p] = (speedup, speedup / p)  # efficiency is the speedup per worker
    return table
'''),
    code("ex.check_scaling_table(scaling_table)"),
    md(r"""
## Going further: Karp–Flatt

The experimentally determined serial fraction $e = (1/S - 1/p) / (1 - 1/p)$ (Karp & Flatt
1990) stays flat when a fixed serial part limits the speedup, and grows with $p$ when an
overhead grows with $p$, such as communication. It inverts Amdahl's law, so it is meant for
strong scaling, as here: the same epoch at every $p$.
"""),
    code(r"""
for p, e in ex.karp_flatt_table(ex.TIMES_S).items():
    print(f"p = {p}: serial fraction e = {e if e is None else round(e, 3)}")
"""),
    md(r"""
## Summary

- Speedup is the one-worker time over the $p$-worker time; efficiency divides it by $p$.
  An inverted ratio gives a speedup below 1, and an efficiency not divided by $p$ can
  exceed 1: both are signs of a slip.
- Efficiency usually falls as workers are added; how fast it falls is the scalability.
- A Karp–Flatt fraction that grows with $p$ points at overhead, not at serial code.
"""),
]

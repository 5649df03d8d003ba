"""Exercise 10: Amdahl or Gustafson?"""

from workbench.notebooks import code, function_task, md

NAME = "10_amdahl_or_gustafson.ipynb"

CELLS = [
    md(r"""
# Exercise 10: Amdahl or Gustafson?

**Goals.** After this exercise you can
- say of which time each law's serial share is a share,
- turn a measured speedup into each law's serial share,
- decide from three or more worker counts which law describes a job, and say when the
  data cannot tell.

**Time:** about 20 minutes.
"""),
    md(r"""
## Background

- **Amdahl**, fixed total work: $S(p) = 1 / (s_A + (1 - s_A)/p)$, with $s_A$ the serial
  share of the **one-worker** time.
- **Gustafson**, work growing with $p$: $S(p) = s_G + (1 - s_G)\,p$, with $s_G$ the serial
  share of the **$p$-worker** time.

Each law has one parameter, so each fits any one measured point exactly. With more worker
counts, the law whose share stays the same from point to point describes the job.
"""),
    code(r"""
from workbench.exercises import laws as ex

for name, points in ex.DATASETS:
    print(f"{name}: " + ", ".join(f"S({p}) = {s:.3f}" for p, s in points))
"""),
    md(r"""
## Task 1

Write `serial_shares(p, speedup)`, returning `(s_amdahl, s_gustafson)`: solve each law for
its own serial share.
"""),
    function_task(r'''
def serial_shares(p, speedup):
    """Return (s_amdahl, s_gustafson) for one measured point."""
    s_amdahl = (p / speedup - 1) / (p - 1)  # of the one-worker time (= Karp-Flatt)
    s_gustafson = (p - speedup) / (p - 1)  # of the p-worker time
    return s_amdahl, s_gustafson
'''),
    code("ex.check_serial_shares(serial_shares)"),
    md(r"""
## Task 2

Write `which_law(points)` for a list of `(p, speedup)`: return `"amdahl"` or
`"gustafson"`, whichever law's share varies less (relative to its size) across the points
with $p > 1$, or `None` when there are fewer than two such points.
"""),
    function_task(r'''
def which_law(points):
    """Return "amdahl", "gustafson", or None when the points cannot tell."""
    shares = [serial_shares(p, s) for p, s in points if p > 1]
    if len(shares) < 2:
        return None  # one parameter per law: each fits one point exactly

    def spread(values):
        return (max(values) - min(values)) / (sum(values) / len(values))

    amdahl = spread([a for a, _ in shares])
    gustafson = spread([g for _, g in shares])
    return "amdahl" if amdahl < gustafson else "gustafson"
''', todo="Your code here: use serial_shares from Task 1."),
    code("ex.check_which_law(which_law)"),
    md(r"""
## Summary

- $s_A$ is a share of the one-worker time, $s_G$ of the $p$-worker time: the same run gives
  two different numbers, so name which one you mean.
- Amdahl's $s_A$ computed point by point is the Karp–Flatt metric; it is meant for strong
  scaling.
- Two worker counts cannot tell the laws apart. Measure at least three (or use the
  simulator, `workbench.scaling.simulate`), then see whose share holds steady.
"""),
]

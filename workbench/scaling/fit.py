"""Which speedup law fits a scaling sweep, and when none can.

Strong scaling (fixed total work) is fitted with Amdahl's law; weak scaling (fixed work per
worker) with Gustafson's, because Amdahl's law describes a fixed problem and would read a
weak-scaling speedup as a serial fraction that is not there. The charts that draw the fit
through the measured points are `workbench.ui.scaling_report` (notebook 06).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from workbench.scaling import metrics


def law_name(mode: str) -> str:
    """The law fitted to a sweep: Amdahl for strong scaling, Gustafson for weak."""
    return "Gustafson" if mode == "weak" else "Amdahl"


def fit_note(rows: Sequence[Mapping], mode: str = "strong") -> str | None:
    """Why no law is fitted to these rows, in words a student can act on; None if one is.

    Amdahl's and Gustafson's laws never give a speedup below 1, whatever their serial
    share: a run slower than one worker is overhead (communication, waiting), and a line
    fitted through it would only mislead. Karp–Flatt says the same in a number: e > 1.
    """
    slow = [r for r in rows if r["np"] > 1 and r["speedup"] < 1]
    if not slow:
        return None
    r = slow[0]
    note = (f"Slower than one worker: communication costs more than it saves. With {r['np']} "
            f"workers the speedup is {r['speedup']:.2f}. ")
    if r.get("karp_flatt") is not None:
        note += (f"Karp–Flatt e = {r['karp_flatt']:.2f}: above 1, which no serial fraction "
                 "can explain; the loss is overhead that grows with the workers. ")
    elif mode == "weak":
        note += "(Karp–Flatt is for strong scaling, so it is not shown.) "
    return note + (f"No {law_name(mode)} fit is drawn: that law cannot give a speedup below 1. "
                   "Try the compute-bound preset, or a larger batch per worker.")


def fitted_law(rows: Sequence[Mapping], mode: str = "strong"):
    """Return ``(name, parallel_fraction, speedup_of_p)`` fitted to the rows, or None.

    None when there is no run with more than one worker yet (nothing to fit), or when a
    run was slower than one worker (no such law can hold; :func:`fit_note` says why).
    """
    points = [(r["np"], r["speedup"]) for r in rows if r["np"] > 1 and r["speedup"] > 0]
    if not points or fit_note(rows, mode):
        return None
    ps, ss = zip(*points, strict=True)
    if mode == "weak":
        f = metrics.fit_gustafson(ps, ss)
        return "Gustafson", f, lambda p: metrics.gustafson(p, f)
    f = metrics.fit_amdahl(ps, ss)
    return "Amdahl", f, lambda p: metrics.amdahl(p, f)

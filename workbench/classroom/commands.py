"""`workbench classroom`: what an instructor runs on a class's server.

    workbench classroom nbgrader OUT_DIR   # the exercises as an nbgrader course
    workbench classroom cores              # the jobs holding this machine's cores, and the queue
    workbench classroom quiet-lab [PREFIX] # no Jupyter-news pop-up for anyone (PREFIX: the
                                           # users' Python environment; default this one)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from workbench.cli import emit_json, guard
from workbench.flags import add_output_flags


def register(sub: argparse._SubParsersAction) -> None:
    """Add `workbench classroom` and its sub-commands."""
    parser = sub.add_parser("classroom", help="for instructors: nbgrader, shared cores, lab")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    grader = actions.add_parser("nbgrader", help="write the exercises as an nbgrader course")
    grader.add_argument("out_dir", metavar="OUT_DIR", help="the course folder to write")
    grader.add_argument("--course-id", default="workbench", help="nbgrader's course id")
    grader.set_defaults(func=guard(cmd_nbgrader))
    cores = actions.add_parser("cores", help="jobs holding this machine's cores, and the queue")
    add_output_flags(cores, runs_dir=False)
    cores.set_defaults(func=guard(cmd_cores))
    lab = actions.add_parser("quiet-lab", help="switch JupyterLab's news pop-up off")
    lab.add_argument("prefix", nargs="?", default=sys.prefix,
                     help="the Python environment JupyterLab runs in (default: this one)")
    lab.set_defaults(func=guard(cmd_quiet_lab))


def cmd_nbgrader(args: argparse.Namespace) -> int:
    from workbench.classroom.nbgrader import write_course

    out = Path(args.out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"OUT_DIR {out} is a file: give a folder for the course")
    for path in write_course(out, args.course_id):
        print(f"wrote {path}")
    print(f"next: cd {out} && nbgrader generate_assignment 01_average_gradients")
    return 0


def cmd_cores(args: argparse.Namespace) -> int:
    from workbench.launch import cores

    state = cores.snapshot()
    if args.json:
        emit_json(state)
        return 0
    now = time.time()
    print(f"shared folder: {cores.settings().folder}")
    for e in state["held"]:
        bound = ",".join(map(str, e["cores"])) or "none (unbound)"
        print(f"running  {e['run_id']:40} {e['user']:12} cores {bound:12} "
              f"for {now - e['since']:.0f} s")
    for i, e in enumerate(state["waiting"], 1):
        print(f"queued {i:>2} {e['run_id']:40} {e['user']:12} needs {e['n_cores']} core(s), "
              f"waiting {now - e['since']:.0f} s")
    if not state["held"] and not state["waiting"]:
        print("no jobs")
    return 0


def cmd_quiet_lab(args: argparse.Namespace) -> int:
    from workbench.classroom.lab import quiet_jupyterlab

    print(f"wrote {quiet_jupyterlab(args.prefix)}")
    return 0

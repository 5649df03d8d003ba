"""Write the exercises as an nbgrader course, for instructors who collect and grade them.

    workbench classroom nbgrader OUT_DIR

writes `OUT_DIR/nbgrader_config.py` and, for each exercise with a checker,
`OUT_DIR/source/<assignment>/<assignment>.ipynb`: the instructor's version, from which
nbgrader's `generate_assignment` makes the students' release. The notebooks come from the
same pages as `notebooks/exercises` (`workbench/exercises/pages/`), so
the two never drift apart. Each cell gets nbgrader's metadata:

- a *task* cell (the code the student writes) becomes a **solution** cell: the solution
  between `### BEGIN SOLUTION` and `### END SOLUTION`, after the lines it shares with the
  exercise (a function's signature and docstring), so the release keeps the signature and
  nbgrader puts `raise NotImplementedError()` where the solution was;
- a cell calling a workbench checker (`ex.check_...(...)`) becomes an **autograded test**
  worth `POINTS` points: it prints the checker's feedback and asserts that it passed;
- every other cell, text or code, is **read-only** and locked, so nbgrader restores it if a
  student edits it.

The review quiz has no checker and is left out.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from workbench.notebooks import EXERCISE_PAGES, Task, new_cell, new_notebook, pages

#: Points of each autograded test cell (one per checked task).
POINTS = 1
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
#: A checker call, as the exercise notebooks write it: ex.check_name(arguments)
CHECK_CALL = re.compile(r"ex\.check_\w+\(.*\)", re.DOTALL)

CONFIG = '''\
"""nbgrader's settings for the workbench exercises (written by `workbench classroom nbgrader`).

Run nbgrader in this folder: `nbgrader generate_assignment 01_average_gradients`, then
`nbgrader release_assignment`, `nbgrader collect`, `nbgrader autograde`.
"""

c = get_config()  # noqa: F821 (nbgrader defines it)

c.CourseDirectory.course_id = "{course_id}"
# What nbgrader writes in place of a solution in the students' release.
c.ClearSolutions.code_stub = {{"python": "# YOUR CODE HERE\\nraise NotImplementedError()"}}
# Seconds a cell may run when autograding (the checkers take well under one).
c.Execute.timeout = 120
'''


def assignments() -> dict[str, list]:
    """{assignment name: cells} for every exercise notebook that has a checker."""
    return {Path(name).stem: cells for name, cells in pages(EXERCISE_PAGES).items()
            if any(_is_check(item) for item in cells)}


def solution_source(task: Task) -> str:
    """The solution with nbgrader's markers around the part the student writes."""
    exercise, solution = task.exercise.strip().splitlines(), task.solution.strip().splitlines()
    shared = 0
    while shared < min(len(exercise), len(solution)) and exercise[shared] == solution[shared]:
        shared += 1
    body = solution[shared:]
    indent = re.match(r"\s*", body[0]).group(0) if body else ""
    return "\n".join([*solution[:shared], indent + BEGIN, *body, indent + END])


def test_source(check: str) -> str:
    """An autograded test: show the checker's feedback, then pass only if the answer did."""
    return (f"feedback = {check}\nprint(feedback)\n"
            "assert feedback.passed, 'not yet: see the feedback above'")


def course_notebook(cells: list) -> nbformat.NotebookNode:
    """The instructor's version of one exercise notebook, with nbgrader's cell metadata."""
    nb = new_notebook()
    tasks = checks = 0
    for i, item in enumerate(cells):
        if isinstance(item, Task):
            tasks += 1
            cell = nbformat.v4.new_code_cell(solution_source(item))
            cell.metadata["nbgrader"] = _meta(f"task-{tasks}", solution=True)
        elif _is_check(item):
            checks += 1
            cell = nbformat.v4.new_code_cell(test_source(item[1]))
            cell.metadata["nbgrader"] = _meta(f"check-{checks}", grade=True, locked=True,
                                              points=POINTS)
        else:
            cell = new_cell(item, solution=True)
            cell.metadata["nbgrader"] = _meta(f"cell-{i:02d}", locked=True)
        cell.id = f"cell-{i:02d}"
        nb.cells.append(cell)
    return nb


def write_course(out_dir: Path, course_id: str = "workbench") -> list[Path]:
    """Write the course folder; return the files written. Existing notebooks are replaced."""
    out_dir = Path(out_dir)
    written = [out_dir / "nbgrader_config.py"]
    out_dir.mkdir(parents=True, exist_ok=True)
    written[0].write_text(CONFIG.format(course_id=course_id))
    for name, cells in assignments().items():
        path = out_dir / "source" / name / f"{name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(nbformat.writes(course_notebook(cells)) + "\n", encoding="utf-8")
        written.append(path)
    return written


def _is_check(item: object) -> bool:
    return (isinstance(item, tuple) and item[0] == "code"
            and CHECK_CALL.fullmatch(item[1].strip()) is not None)


def _meta(grade_id: str, solution: bool = False, grade: bool = False, locked: bool = False,
          points: int | None = None) -> dict:
    """nbgrader's cell metadata (schema version 3)."""
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
            "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return meta

"""`workbench classroom nbgrader`: the course it writes goes through nbgrader's own command
line (generate_assignment, autograde, export). Every assignment gets nbgrader's metadata; on
a representative one (GRADED), the worked solution gets full points, the released blank
none, and one typical wrong answer loses exactly the points of its task (and no others), as
does an answer that patches the checker's verdict from inside the student's function."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from workbench.classroom import nbgrader as course
from workbench.notebooks import Task

BIN = Path(sys.executable).parent

#: The assignment nbgrader autogrades here, chosen as representative: it has two tasks, a
#: function and a plain value, so each wrong answer must lose exactly its own task's point.
#: What nbgrader adds is the same for every assignment: the cell metadata (checked for all of
#: them below) and running the test cells. Whether each checker accepts right answers and
#: rejects wrong ones is tested for every exercise, without nbgrader, in tests/exercises/.
GRADED = "05_pipeline_bubble"

#: One typical wrong answer per task of the graded assignment: {task number: code}.
WRONG = {
    1: '''
def bubble_fraction(stages, micro_batches):
    return (stages - 1) / micro_batches  # forgets the fill and drain slots
''',
    2: "micro_batches_needed = 30  # from (P - 1) / M <= 0.1",
}
#: A wrong answer to task 1 that, run by the locked test cell in the same kernel, makes every
#: verdict built after it say "passed" (the checker puts its class back and refuses it).
PATCHES_THE_VERDICT = '''
def bubble_fraction(stages, micro_batches):
    import workbench.exercises.feedback as fb
    if not getattr(fb.Feedback, "_patched", False):
        original = fb.Feedback.__init__
        def init(self, *args, **kwargs):
            original(self, *args, **kwargs)
            object.__setattr__(self, "passed", True)
            object.__setattr__(self, "hints", [])
        fb.Feedback.__init__ = init
        fb.Feedback._patched = True
    return 0.5
'''


def tasks(name: str) -> list[Task]:
    return [item for item in course.assignments()[name] if isinstance(item, Task)]


def test_every_task_of_the_graded_assignment_has_a_wrong_answer_and_all_have_metadata(tmp_path):
    course.write_course(tmp_path)
    names = course.assignments()
    assert set(WRONG) == set(range(1, len(tasks(GRADED)) + 1)) == {1, 2}
    for name in names:
        nb = nbformat.read(tmp_path / "source" / name / f"{name}.ipynb", as_version=4)
        meta = [c.metadata["nbgrader"] for c in nb.cells]
        solutions = [c for c in nb.cells if c.metadata["nbgrader"]["solution"]]
        graded = [m for m in meta if m["grade"]]
        assert len(solutions) == len(graded) == len(tasks(name))
        assert all(course.BEGIN in c.source and course.END in c.source for c in solutions)
        assert all(m["locked"] and m["points"] == course.POINTS for m in graded)
        assert all(m["locked"] for m in meta if not m["solution"])
        assert len({m["grade_id"] for m in meta}) == len(meta)


def submission(release: Path, answers: dict[int, str]) -> nbformat.NotebookNode:
    """The released notebook with task k's cell replaced by answers[k] (others blank)."""
    nb = nbformat.read(release, as_version=4)
    solution_cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    for k, cell in enumerate(solution_cells, 1):
        if k in answers:
            cell.source = answers[k].strip()
    return nb


def nbgrader(course_dir: Path, *args: str) -> None:
    start = time.monotonic()
    # nbgrader runs `alembic` from PATH: the environment's bin folder comes first.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([str(BIN / "nbgrader"), *args], cwd=course_dir, capture_output=True,
                          text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(f"nbgrader {args[0]}: {time.monotonic() - start:.0f} s")


@pytest.mark.timeout(600)  # 5 notebooks, each run in a fresh kernel: under a minute when idle
@pytest.mark.skipif(shutil.which("nbgrader", path=str(BIN)) is None,
                    reason="nbgrader is not installed: run `make setup` (the dev extra)")
def test_nbgrader_grades_solutions_blanks_and_typical_wrong_answers(tmp_path):
    from workbench.cli import main

    root = tmp_path / "course"
    assert main(["classroom", "nbgrader", str(root)]) == 0
    for source in (root / "source").iterdir():   # the other assignments: see GRADED
        if source.name != GRADED:
            shutil.rmtree(source)
    nbgrader(root, "generate_assignment", "*")
    release = root / "release" / GRADED / f"{GRADED}.ipynb"
    solved = {k: t.solution for k, t in enumerate(tasks(GRADED), 1)}
    # student: (answers by task, tasks right); the blank release must score nothing.
    students = {"solutions": (solved, 2), "blanks": ({}, 0),
                "wrong1": ({**solved, 1: WRONG[1]}, 1), "wrong2": ({**solved, 2: WRONG[2]}, 1),
                "patcher": ({**solved, 1: PATCHES_THE_VERDICT}, 1)}
    for student, (answers, _) in students.items():
        folder = root / "submitted" / student / GRADED
        folder.mkdir(parents=True)
        nbformat.write(submission(release, answers), folder / f"{GRADED}.ipynb")
    nbgrader(root, "autograde", "*")
    nbgrader(root, "export", "--to", str(root / "grades.csv"))
    with open(root / "grades.csv") as f:
        graded = {row["student_id"]: (float(row["score"]), float(row["max_score"]))
                  for row in csv.DictReader(f) if row["assignment"] == GRADED}
    print(json.dumps(graded))
    assert graded == {student: (float(right * course.POINTS), float(2 * course.POINTS))
                      for student, (_, right) in students.items()}


def test_classroom_nbgrader_refuses_a_file_for_out_dir(tmp_path, capsys):
    from workbench.cli import main

    (tmp_path / "course").write_text("")
    assert main(["classroom", "nbgrader", str(tmp_path / "course")]) == 2
    assert "is a file" in capsys.readouterr().err

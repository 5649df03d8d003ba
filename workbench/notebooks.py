"""Write every notebook of the course from its page: the one way to make a ``.ipynb``.

    python -m workbench.notebooks            # writes notebooks/, notebooks/exercises,
                                             # notebooks/solutions
    python -m workbench.notebooks --check    # exit 1 if one is out of date

The text and code of the notebooks live in *pages*, one Python module per notebook:
``workbench/lessons/pages/`` for the curriculum, ``workbench/exercises/pages/`` for the
exercises. A page has ``NAME`` (its file name) and ``CELLS``, a list written with
:func:`md`, :func:`code`, :class:`Task` and :func:`function_task`; a *task* cell has an
exercise version (with ``raise NotImplementedError``) and a solution version, which is how
one exercise page gives both ``notebooks/exercises/`` and ``notebooks/solutions/``.

A code cell also says what the student should see under it, in its metadata
(``workbench.shows``, see :func:`promises`): the tables and charts that its code builds,
and the buttons the page invites the student to press with what each must bring. The
browser test of every notebook (tests/browser/test_every_notebook.py) fails when one is
not on the page.

Edit the pages, not the ``.ipynb`` files: this module turns them into notebooks saved
without outputs, with the ``python3`` kernelspec (so JupyterLab opens them without asking
for a kernel) and stable cell ids (so regenerating gives identical files, and ``--check``
can compare them).

This is machinery, not content: it lives beside the concept folders, not inside one, so
that neither the lessons nor the exercises borrow it from the other.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
#: What a lesson's ``language_info`` records: enough for JupyterLab's highlighting (the
#: exercises, and the nbgrader course made from them, record only the language's name).
LESSON_LANGUAGE = {"name": "python", "file_extension": ".py", "mimetype": "text/x-python",
                   "pygments_lexer": "ipython3", "codemirror_mode": {"name": "ipython",
                                                                     "version": 3}}
#: The pages packages: each module in them is one notebook.
LESSON_PAGES, EXERCISE_PAGES = "workbench.lessons.pages", "workbench.exercises.pages"


# --- the cells a page is written in -------------------------------------------------------------

@dataclass(frozen=True)
class Task:
    """A code cell whose content differs between the exercise and the solution."""

    exercise: str
    solution: str


def function_task(solution: str, todo: str = "Your code here.") -> Task:
    """A task to write one function, given its solution.

    The exercise keeps the solution's signature and docstring (what the checker calls, and
    what it must do), then `todo` as a comment and ``raise NotImplementedError``: so they
    are written once and cannot drift apart. `todo` may span several lines.
    """
    lines = solution.strip().splitlines()
    first = ast.parse(solution.strip()).body[0].body[0]  # the function's first statement
    is_docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    header = lines[:first.end_lineno if is_docstring else first.lineno - 1]
    indent = " " * first.col_offset
    body = [*(f"# {line}" for line in todo.strip().splitlines()), "raise NotImplementedError"]
    return Task(exercise="\n".join([*header, *(indent + line for line in body)]),
                solution=solution)


def md(text: str) -> tuple[str, str]:
    """A Markdown cell."""
    return ("markdown", text.strip())


def code(text: str, *, shows: dict[str, int] | None = None,
         press: dict[str, str] | None = None) -> tuple:
    """A code cell, the same in the exercise and the solution.

    `shows` adds to what its code visibly builds (see :func:`promises`), e.g. ``{"table":
    1}`` for a table that a helper displays; `press` names the buttons the page invites the
    student to press, each with what must then appear under the cell (``"table"``,
    ``"chart"`` or ``"output"``, any output at all).
    """
    extra = {k: v for k, v in (("shows", shows), ("press", press)) if v}
    return ("code", text.strip(), extra) if extra else ("code", text.strip())


def md_table(header: tuple[str, ...], *rows: tuple[str, ...]) -> str:
    """A Markdown table, so that long rows can be written over several source lines."""
    lines = [header, tuple("---" for _ in header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


# --- from cells to a notebook file --------------------------------------------------------------

def new_notebook(language_info: dict | None = None) -> nbformat.NotebookNode:
    """An empty notebook with the kernelspec set, so JupyterLab asks for no kernel."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": dict(KERNELSPEC),
                   "language_info": dict(language_info or {"name": "python"})}
    return nb


#: The lesson helpers whose result is something to see, and what it is: a cell that calls one
#: promises the student that many tables and charts (notebooks/ then records the promise).
SHOWN_BY = {"table": "table", "curves": "chart", "figure_widget": "chart"}


def promises(source: str, declared: dict | None = None) -> dict:
    """What a code cell promises to show: ``{"shows": {"table": n, "chart": m, "verdict":
    k}, "press": {button: what}}``, counted from the calls of :data:`SHOWN_BY`'s helpers and
    of an exercise's checkers (``check_*``, whose verdict is then all the cell shows) in
    `source`, one per place called, and added to what the page `declared` with :func:`code`.

    Counting the calls makes a table that is built but never displayed (a ``table(...)``
    that is not the cell's last expression) a broken promise, without anyone having to
    remember to declare it.
    """
    declared = declared or {}
    try:
        calls = [node.func for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)]
    except SyntaxError:  # an exercise's unfinished code: it promises nothing
        calls = []
    names = [getattr(f, "id", None) or getattr(f, "attr", None) or "" for f in calls]
    shows = dict(declared.get("shows", {}))
    for name in names:
        shown = "verdict" if name.startswith("check_") else SHOWN_BY.get(name)
        if shown:
            shows[shown] = shows.get(shown, 0) + 1
    return {k: v for k, v in (("shows", shows), ("press", declared.get("press"))) if v}


def new_cell(item: tuple | Task, solution: bool) -> nbformat.NotebookNode:
    """The notebook cell for one item of a page (a task gives its exercise or solution),
    a code cell with what it promises to show in its metadata (:func:`promises`)."""
    if isinstance(item, Task):
        kind, text, declared = "code", (item.solution if solution else item.exercise).strip(), {}
    else:
        kind, text, *rest = item
        declared = rest[0] if rest else {}
    if kind == "markdown":
        return nbformat.v4.new_markdown_cell(text)
    cell = nbformat.v4.new_code_cell(text)
    promised = promises(text, declared)
    if promised:
        cell.metadata["workbench"] = promised
    return cell


def build(cells: list, solution: bool, language_info: dict | None = None) -> nbformat.NotebookNode:
    """One notebook, without outputs, with the kernelspec set and stable cell ids."""
    nb = new_notebook(language_info)
    nb.cells = [new_cell(item, solution) for item in cells]
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"  # stable ids: regenerating gives identical files
    return nb


def pages(package: str) -> dict[str, list]:
    """{file name: cells} for every page module of `package`, in file-name order. A module
    whose name begins with "_" holds sections that a page includes, and is no page itself.

    Imported here, when asked for, and not at the top of this module: the pages themselves
    import :func:`md` and :func:`code` from it.
    """
    found = [importlib.import_module(f"{package}.{info.name}")
             for info in pkgutil.iter_modules(importlib.import_module(package).__path__)
             if not info.name.startswith("_")]
    return {page.NAME: page.CELLS for page in sorted(found, key=lambda page: page.NAME)}


def render_all(root: Path = ROOT) -> dict[Path, str]:
    """{path: text} of every notebook file, exactly as it is saved."""
    books = [(root / "notebooks", LESSON_PAGES, False, LESSON_LANGUAGE),
             (root / "notebooks" / "exercises", EXERCISE_PAGES, False, None),
             (root / "notebooks" / "solutions", EXERCISE_PAGES, True, None)]
    return {folder / name: nbformat.writes(build(cells, solution, language)) + "\n"
            for folder, package, solution, language in books
            for name, cells in pages(package).items()}


def write_all(root: Path = ROOT, check: bool = False) -> list[Path]:
    """Write each notebook whose file differs from its page (with check=True, only list them)."""
    stale = []
    for path, text in render_all(root).items():
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    """The command line: write the notebooks, or with `--check` exit 1 if one is stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only report notebooks that differ from their page")
    args = parser.parse_args(argv)
    stale = write_all(check=args.check)
    for path in stale:
        print(("out of date: " if args.check else "wrote ") + str(path.relative_to(ROOT)))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    # Run as a script this file is `__main__`, a second copy of the module; the pages import
    # `workbench.notebooks`, whose Task is another class. Use that copy throughout.
    from workbench import notebooks

    sys.exit(notebooks.main())

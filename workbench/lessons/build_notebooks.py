"""Write the curriculum notebooks, ``notebooks/00_*.ipynb`` ... ``06_*.ipynb``.

    python -m workbench.lessons.build_notebooks            # writes the notebooks
    python -m workbench.lessons.build_notebooks --check    # exit 1 if one is out of date

Each notebook is described once, as a list of cells, in :mod:`workbench.lessons.pages`. The
cells are turned into a notebook by the same code as the exercise notebooks
(:mod:`workbench.exercises.build_notebooks`): saved without outputs, with the ``python3``
kernelspec (so JupyterLab opens them without asking for a kernel) and stable cell ids (so
regenerating gives identical files). Edit the pages, not the ``.ipynb`` files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from workbench.exercises.build_notebooks import ROOT, build
from workbench.lessons.pages import (
    p00_welcome,
    p01_sgd,
    p02_data_parallelism,
    p03_synchronization,
    p04_parallelism,
    p05_scaling,
    p06_review,
)

#: File name -> the cells of that notebook.
NOTEBOOKS = {page.NAME: page.CELLS for page in (p00_welcome, p01_sgd, p02_data_parallelism,
                                                 p03_synchronization, p04_parallelism,
                                                 p05_scaling, p06_review)}

#: What ``language_info`` records: enough for JupyterLab's highlighting and for nbformat.
LANGUAGE_INFO = {"name": "python", "file_extension": ".py", "mimetype": "text/x-python",
                 "pygments_lexer": "ipython3", "codemirror_mode": {"name": "ipython",
                                                                   "version": 3}}


def render(name: str) -> str:
    """The text of one notebook file, exactly as it is saved."""
    nb = build(NOTEBOOKS[name], solution=False)
    nb.metadata["language_info"] = dict(LANGUAGE_INFO)
    return nbformat.writes(nb) + "\n"


def write_all(root: Path = ROOT, check: bool = False) -> list[Path]:
    """Write every notebook (or, with check=True, only list those whose file differs)."""
    stale = []
    for name in NOTEBOOKS:
        path = root / "notebooks" / name
        text = render(name)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not check:
            path.write_text(text, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only report notebooks that differ from their description")
    args = parser.parse_args(argv)
    stale = write_all(check=args.check)
    for path in stale:
        print(("out of date: " if args.check else "wrote ") + str(path.relative_to(ROOT)))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())

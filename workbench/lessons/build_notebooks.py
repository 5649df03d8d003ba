"""Write the curriculum notebooks, ``notebooks/00_*.ipynb`` ... ``07_*.ipynb``.

    python -m workbench.lessons.build_notebooks            # writes the notebooks
    python -m workbench.lessons.build_notebooks --check    # exit 1 if one is out of date

Each notebook is described once, as a list of cells, in :mod:`workbench.lessons.pages`. The
cells are turned into a notebook by the same code as the exercise notebooks
(:mod:`workbench.exercises.build_notebooks`): saved without outputs, with the ``python3``
kernelspec (so JupyterLab opens them without asking for a kernel) and stable cell ids (so
regenerating gives identical files). Edit the pages, not the ``.ipynb`` files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

from workbench.exercises.build_notebooks import ROOT, build, run_builder, sync_files
from workbench.lessons.pages import (
    p00_welcome,
    p01_sgd,
    p02_data_parallelism,
    p03_synchronization,
    p04_collectives,
    p05_parallelism,
    p06_scaling,
    p07_review,
)

#: File name -> the cells of that notebook.
NOTEBOOKS = {page.NAME: page.CELLS for page in (p00_welcome, p01_sgd, p02_data_parallelism,
                                                 p03_synchronization, p04_collectives,
                                                 p05_parallelism, p06_scaling, p07_review)}

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
    return sync_files({root / "notebooks" / name: render(name) for name in NOTEBOOKS}, check)


def main(argv: list[str] | None = None) -> int:
    return run_builder(write_all, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())

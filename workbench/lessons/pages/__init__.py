"""The text and code of each curriculum notebook, one module per notebook.

Every module has ``NAME`` (the file name under ``notebooks/``) and ``CELLS`` (a list of
``md(...)`` and ``code(...)`` cells, see :mod:`workbench.exercises.build_notebooks`).
"""


def md_table(header: tuple[str, ...], *rows: tuple[str, ...]) -> str:
    """A Markdown table, so that long rows can be written over several source lines."""
    lines = [header, tuple("---" for _ in header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)

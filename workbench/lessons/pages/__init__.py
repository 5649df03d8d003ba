"""The text and code of each curriculum notebook, one module per notebook.

Every module has ``NAME`` (the file name under ``notebooks/``) and ``CELLS`` (a list of
``md(...)`` and ``code(...)`` cells); :mod:`workbench.notebooks` turns them into notebooks.
"""

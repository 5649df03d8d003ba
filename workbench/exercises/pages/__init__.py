"""The text and code of each exercise notebook, one module per notebook.

Every module has ``NAME`` (the file name under ``notebooks/exercises/`` and
``notebooks/solutions/``) and ``CELLS``: ``md(...)`` and ``code(...)`` cells, and ``Task``
cells, whose exercise version the student completes and whose solution version is the worked
answer. :mod:`workbench.notebooks` turns them into both notebooks; the checkers the cells
call are the modules beside this folder.
"""

"""Running the workbench for a class: nbgrader assignments (`nbgrader.py`), a quiet
JupyterLab for every student (`lab.py`), and the `workbench classroom` command.

Lessons it serves: the exercises, graded with nbgrader
(notebooks/exercises/01_average_gradients.ipynb to 13_overlap_the_all_reduce.ipynb).
"""

"""Running the workbench for a class: nbgrader assignments (`nbgrader.py`), a quiet
JupyterLab for every student (`lab.py`), and the `workbench classroom` command."""

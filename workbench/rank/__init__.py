"""The rank's side: what runs inside each process a launcher starts (the launcher's: launch/,
which nothing here imports). The package is also `workbench.rank()`. See docs/ARCHITECTURE.md.
Lessons it serves: notebooks/03_synchronization.ipynb (ranks that report) and every job's ranks.
"""

from workbench import callable_package

callable_package(__name__, "workbench.rank.api")

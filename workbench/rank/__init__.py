"""The rank's side: what runs inside each process a launcher starts (the launcher's: launch/).

Every rank runs in the wrapper (wrapper.py), which opens its context (protocol.py: pid
file, log, watchdog, exit record) around a rank module, a script or a function; rank
modules find it with context.py, your code reports through api.py (`workbench.report()`).
Nothing here imports launch/. The package is also the function `rank` (`workbench.rank()`).
Why it is built so: docs/ARCHITECTURE.md, "The machinery".
Lessons it serves: notebooks/03_synchronization.ipynb (ranks that report) and every job's ranks.
"""

from workbench import callable_package

callable_package(__name__, "workbench.rank.api")

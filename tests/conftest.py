"""Settings every test shares.

Jobs share a host's cores through a folder (workbench/jobs/cores.py). Each test session gets
a folder of its own, so two sessions on one machine, or a notebook left running, do not queue
behind each other's jobs; and no per-user limit, even in a hub's terminal. Tests of the
sharing itself set their own values.
"""

import os
import tempfile

os.environ.setdefault("WORKBENCH_SHARED_DIR", tempfile.mkdtemp(prefix="workbench-tests-"))
os.environ.setdefault("WORKBENCH_JOBS_PER_USER", "0")

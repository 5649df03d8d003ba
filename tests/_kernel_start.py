"""A notebook whose kernel died before it ran a cell is run again, at most twice.

jupyter_client picks a kernel's five TCP ports by binding port 0 and closing the socket;
the kernel binds them a second or two later, once Python has started. In between, any
process on the machine may take one: the suite's gloo and Horovod ranks open listeners and
connections on ephemeral ports all the time. ipykernel then fails in `init_sockets`
("Address already in use"), and nbclient reports "Kernel died before replying to
kernel_info". Nothing of the notebook has run, so running it again is the same test, not
a second chance for a failing one; any other failure, in a cell or not, stands.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest

#: What nbclient says when the kernel process exited before it answered.
KERNEL_NEVER_STARTED = "Kernel died before replying to kernel_info"
ATTEMPTS = 3


def retried(runtest: Callable[[], None], name: str) -> Callable[[], None]:
    """`runtest`, run again while its only failure is a kernel that never started."""

    def run() -> None:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return runtest()
            except RuntimeError as err:
                if KERNEL_NEVER_STARTED not in str(err) or attempt == ATTEMPTS:
                    raise
                warnings.warn(f"{name}: the kernel died before it ran a cell "
                              f"(try {attempt} of {ATTEMPTS}); starting a new one",
                              stacklevel=1)

    return run


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if getattr(item, "nbmake", False):
            item.runtest = retried(item.runtest, item.name)

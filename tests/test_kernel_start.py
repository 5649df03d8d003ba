"""A notebook is run again only when its kernel never started (tests/_kernel_start.py)."""

import pytest
from _kernel_start import ATTEMPTS, KERNEL_NEVER_STARTED, retried


def failing(*errors: Exception):
    """A runtest that raises each of `errors` in turn, then passes; it counts its calls."""
    calls = []

    def runtest() -> None:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]

    return runtest, calls


def test_a_kernel_that_died_at_start_is_started_again_and_said():
    runtest, calls = failing(RuntimeError(KERNEL_NEVER_STARTED))
    with pytest.warns(UserWarning, match="the kernel died before it ran a cell"):
        retried(runtest, "nb.ipynb")()
    assert len(calls) == 2


def test_any_other_failure_stands_at_once():
    for err in (RuntimeError("Kernel didn't respond in 60 seconds"), AssertionError("cell 3")):
        runtest, calls = failing(err)
        with pytest.raises(type(err)):
            retried(runtest, "nb.ipynb")()
        assert len(calls) == 1


def test_a_kernel_that_never_starts_fails_after_its_tries():
    runtest, calls = failing(*[RuntimeError(KERNEL_NEVER_STARTED)] * ATTEMPTS)
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match=KERNEL_NEVER_STARTED):
        retried(runtest, "nb.ipynb")()
    assert len(calls) == ATTEMPTS

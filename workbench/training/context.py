"""`with rank_context() as ctx:`: how a rank module gets its context, the one line before
its own steps.

Started by the workbench (`WORKBENCH_RUN_DIR` is set), a rank takes the run folder its
launcher made and follows the rank protocol in it (rank_protocol.py). Started by plain torchrun,
horovodrun or python, the ranks make their own run folder from their flags instead
(standalone.py). Run as a call on a warm rank, a module gets the call's context, already
open (`handed_over`, used by jobs/pool_rank.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workbench.training.rank_protocol import (
    ENV_RUN_DIR,
    RankContext,
    launcher_identity,
    load_env_file,
)
from workbench.training.standalone import standalone_context

#: The context a warm rank hands to the module it runs in-process (None: none handed over).
_handed: RankContext | None = None


def rank_context() -> Any:
    """This rank's context, to enter with `with`: it writes the rank's pid file and log, its
    exit record on the way out, and watches its owner (see rank_protocol.py)."""
    if _handed is not None:
        return contextlib.nullcontext(_handed)  # entered and closed by the one who handed it
    load_env_file()  # the job's secret --env values, from their 0600 file
    rank, size, local = launcher_identity()
    if ENV_RUN_DIR not in os.environ:
        return standalone_context(rank, size, local)
    return RankContext(Path(os.environ[ENV_RUN_DIR]), rank, size, local)


@contextlib.contextmanager
def handed_over(ctx: RankContext) -> Iterator[None]:
    """While it lasts, `rank_context()` gives `ctx`, open already: a rank module run inside
    a rank that already follows the protocol (a pool's call) reports into its context."""
    global _handed
    _handed = ctx
    try:
        yield
    finally:
        _handed = None

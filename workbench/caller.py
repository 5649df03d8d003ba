"""The caller's line: where a warning for the user points.

A warning raised deep in the workbench (a job's cores, a payload's size) means something
only at the line that asked for it: the student's cell or script, or an exercise's call.
"""

from __future__ import annotations

import os
import sys
import warnings

#: Frames in this folder are the workbench's own: a warning points past them.
_PACKAGE_DIR = os.path.dirname(__file__) + os.sep


def warn_caller(text: str) -> None:
    """Warn from the first line outside the workbench that led here, however deep the path
    (start, launch, a pool, an exercise's checker)."""
    level, frame = 2, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        level, frame = level + 1, frame.f_back
    warnings.warn(text, stacklevel=level)

"""Classroom exercises and their checkers.

Each exercise notebook in ``notebooks/exercises/`` asks the student to write one small
function, then calls a checker from here. Every checker has the same shape::

    check_something(student_function) -> Feedback(passed, message, hints)

and never raises on a wrong answer, so the notebook runs from top to bottom even when the
answer is not finished. Wrong answers get hints that name the likely mistake.

The notebooks' text is in :mod:`.pages`, one module per notebook, which
:mod:`workbench.notebooks` writes out as the exercise and its worked solution.

| exercise | module | checker |
| --- | --- | --- |
| average gradients with an allreduce | :mod:`.allreduce` | ``check_average_gradients`` |
| shard a dataset | :mod:`.sharding` | ``check_shard`` |
| speedup and efficiency from timings | :mod:`.scaling` | ``check_scaling_table`` |
| finish a ring allreduce | :mod:`.ring` | ``check_reduce_scatter_step``, ``check_allgather_step`` |
| pipeline bubble | :mod:`.pipeline` | ``check_bubble_fraction``, ``check_micro_batches`` |
| data or model parallelism? | :mod:`.parallelism` | ``check_parallelism_choice`` |
| asynchronous staleness | :mod:`.staleness` | ``check_staleness``, ``check_staleness_lr`` |
| the linear scaling rule with warm-up | :mod:`.lr_scaling` | ``check_learning_rate`` |
| Amdahl or Gustafson? | :mod:`.laws` | ``check_serial_shares``, ``check_which_law`` |
| make this loop data-parallel (2, 3 ranks) | :mod:`.data_parallel` | ``check_data_parallel`` |
| the ZeRO-1 step (2, 3 ranks) | :mod:`.zero` | ``check_shard_optimizer``, ``check_zero1`` |
| overlap the all-reduce (2 ranks) | :mod:`.overlap` | ``check_launch_hook`` |

Lessons it serves: notebooks/exercises/ (their solutions: notebooks/solutions/), e.g.
notebooks/exercises/01_average_gradients.ipynb.
"""

import importlib
import sys

from workbench.exercises import (  # noqa: F401  (recorded below)
    intact,
    network,
    overlap,
    own_work,
    references,
    watch,
    zero,
    zero_rank,
)
from workbench.exercises.allreduce import check_average_gradients
from workbench.exercises.data_parallel import check_data_parallel
from workbench.exercises.feedback import Feedback
from workbench.exercises.laws import check_serial_shares, check_which_law
from workbench.exercises.lr_scaling import check_learning_rate
from workbench.exercises.parallelism import check_parallelism_choice
from workbench.exercises.pipeline import check_bubble_fraction, check_micro_batches
from workbench.exercises.ring import check_allgather_step, check_reduce_scatter_step
from workbench.exercises.scaling import check_scaling_table
from workbench.exercises.sharding import check_shard
from workbench.exercises.staleness import check_staleness, check_staleness_lr

#: The package's modules the checkers' references compute with: patching one (say
#: schedule.idle_fraction to return the student's constant) would change the expected value.
REFERENCES_USE = ("workbench.model_parallel.schedule", "workbench.scaling.metrics",
                  "workbench.scaling.costmodel", "workbench.synchronization.ring_allreduce",
                  "workbench.quiz.bank", "workbench.sharded.memory", "workbench.sharded.flat")

# Before any notebook code runs: what it changes in them is put back (intact.py).
intact.record([sys.modules[name] for name in sorted(sys.modules)
               if name.startswith("workbench.exercises.") and ".pages" not in name]
              + [importlib.import_module(name) for name in REFERENCES_USE])

__all__ = [
    "Feedback",
    "check_allgather_step",
    "check_average_gradients",
    "check_bubble_fraction",
    "check_data_parallel",
    "check_learning_rate",
    "check_micro_batches",
    "check_parallelism_choice",
    "check_reduce_scatter_step",
    "check_scaling_table",
    "check_serial_shares",
    "check_shard",
    "check_staleness",
    "check_staleness_lr",
    "check_which_law",
]

"""Exercise 5: predict a pipeline bubble."""

from workbench.notebooks import Task, code, function_task, md

NAME = "05_pipeline_bubble.ipynb"

CELLS = [
    md(r"""
# Exercise 5: predict a pipeline bubble

**Goals.** After this exercise you can
- read a GPipe pipeline schedule,
- derive the idle share of the devices, the *bubble*,
- choose enough micro-batches to keep the bubble small.

**Time:** about 15 minutes.
"""),
    md(r"""
## Background

In pipeline model parallelism a model is cut into $P$ stages on $P$ devices, and each
mini-batch into $M$ micro-batches that flow through the stages one after the other
(Huang et al. 2019, GPipe). Below, each row is a stage, each column a time slot, each number
the micro-batch that stage works on; `.` is an idle slot.
"""),
    code(r"""
from workbench.exercises import pipeline as ex

print(ex.show_schedule(stages=4, micro_batches=6))
"""),
    md(r"""
## Task 1

Count the idle slots in the schedule above, then write `bubble_fraction(stages,
micro_batches)` as a formula in $P$ and $M$: the share of the (stage, slot) cells that are
idle. (The checker counts the schedule itself, so your function may not call it.)
"""),
    function_task(r'''
def bubble_fraction(stages, micro_batches):
    """The idle share of a GPipe schedule with P stages and M micro-batches."""
    slots = micro_batches + stages - 1  # the last micro-batch leaves the last stage here
    return (stages - 1) / slots  # each stage idles P - 1 of those slots
'''),
    code("ex.check_bubble_fraction(bubble_fraction)"),
    md(r"""
## Task 2

With $P = 4$ stages, what is the smallest number of micro-batches $M$ that keeps the bubble
at or below 10%?
"""),
    Task(
        exercise=r'''
micro_batches_needed = None  # your answer: a whole number
''',
        solution=r'''
# 3 / (M + 3) <= 0.1  <=>  M + 3 >= 30  <=>  M >= 27
micro_batches_needed = 27
'''),
    code("ex.check_micro_batches(micro_batches_needed)"),
    md(r"""
## Summary

- With $P$ stages and $M$ micro-batches the bubble is $(P-1)/(M+P-1)$: more micro-batches
  shrink it; more stages grow it. At $M = 4P$ it is still $(P-1)/(5P-1)$: 11.1% for
  $P = 2$, 15.8% for $P = 4$, approaching 20% as $P$ grows.
  Megatron-LM writes the same idle time over the ideal time, $(P-1)/M$: both are right;
  say which one you use.
- The 1F1B schedule with a flush (PipeDream-Flush, Narayanan et al., ICML 2021) keeps the
  same bubble but holds only $P$ micro-batches of
  activations instead of $M$; Megatron-LM's interleaved schedule divides the bubble by the
  number of model chunks per stage.
"""),
]

"""Exercise 9: the linear scaling rule, with a warm-up."""

from workbench.notebooks import code, function_task, md

NAME = "09_linear_scaling_rule.ipynb"

CELLS = [
    md(r"""
# Exercise 9: the linear scaling rule, with a warm-up

**Goals.** After this exercise you can
- say how the global batch grows with the number of workers,
- scale the learning rate with it (Goyal et al. 2017),
- add the gradual warm-up that makes large rates safe at the start.

**Time:** about 15 minutes.
"""),
    md(r"""
## Background

With $p$ workers of $b$ samples each, every update averages a global batch of $p b$
samples. A rate $\eta$ tuned for a batch of $B_0$ is then too small: Goyal et al. use
$k \eta$ with $k = p b / B_0$ (**linear scaling**), reached by a **gradual warm-up**: the
rate rises linearly from $\eta$ to $k \eta$ over the first 5 epochs. Here $\eta = 0.1$ was
tuned for $B_0 = 256$, as in the paper.
"""),
    code(r"""
from workbench.exercises import lr_scaling as ex

print(f"base rate {ex.BASE_LR} for a global batch of {ex.BASE_BATCH}, "
      f"warm-up over {ex.WARMUP_EPOCHS} epochs")
"""),
    md(r"""
## Your task

Write `learning_rate(epoch, workers, batch_per_worker, base_lr, base_batch, warmup_epochs)`:
$\eta$ is `base_lr`, $B_0$ is `base_batch`, and the warm-up lasts `warmup_epochs` epochs
(the defaults are the paper's). `epoch` may be fractional (2.5 is half-way through the
third epoch). The checker also tries another tuning, so use the parameters.
"""),
    function_task(r'''
def learning_rate(epoch, workers, batch_per_worker, base_lr=ex.BASE_LR,
                  base_batch=ex.BASE_BATCH, warmup_epochs=ex.WARMUP_EPOCHS):
    """The learning rate at this epoch, by the linear scaling rule with warm-up."""
    k = workers * batch_per_worker / base_batch  # the global batch, relative to B0
    target = k * base_lr
    if epoch >= warmup_epochs:
        return target
    return base_lr + (target - base_lr) * epoch / warmup_epochs
'''),
    code("ex.check_learning_rate(learning_rate)"),
    md(r"""
## Summary

- The global batch is $p \cdot b$; the rule scales the rate by $k = p b / B_0$, not by $p$
  alone and not by the batch of one worker.
- The warm-up starts at $\eta$, not at 0, and reaches $k \eta$ after 5 epochs. The lab's
  `warmup_epochs` (`workbench scale --scale-lr --warmup-epochs E`, notebook 06) ramps the
  same way, from the unscaled rate to the scaled one.
- With both, Goyal et al. trained ResNet-50 with a batch of 8192 without losing accuracy;
  beyond that, large batches do change what is learned.
"""),
]

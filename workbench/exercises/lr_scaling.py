"""Exercise: the linear scaling rule, with a gradual warm-up.

Synchronous data parallelism with p workers and b samples per worker averages each update
over a global batch of p·b samples: fewer, larger steps per epoch. Goyal et al. ("Accurate,
Large Minibatch SGD: Training ImageNet in 1 Hour", 2017, arXiv:1706.02677) keep the
accuracy of small batches with two rules:

* **linear scaling**: when the global batch is k times the batch the learning rate η was
  tuned for, use k·η;
* **gradual warm-up**: start at η and raise the rate linearly to k·η over the first 5
  epochs, because large steps early in training, while the weights change fast, diverge.

With them they trained ResNet-50 with a global batch of 8192 and no loss of accuracy.
"""

from __future__ import annotations

import math

from workbench.exercises.feedback import Feedback, call_student, correct, guarded, not_yet
from workbench.quiz.bank import parse_number

#: The rate that was tuned, and the global batch it was tuned for (Goyal et al.: 0.1 at 256).
BASE_LR, BASE_BATCH, WARMUP_EPOCHS = 0.1, 256, 5

#: (epoch, workers, batch per worker) cases the checker tries; epochs may be fractional.
CASES = ((10.0, 8, 32), (10.0, 32, 32), (20.0, 4, 256), (0.0, 32, 32), (2.5, 32, 32),
         (4.0, 16, 64), (7.0, 1, 256), (1.0, 2, 256))


def reference_lr(epoch: float, workers: int, batch_per_worker: int) -> float:
    """The learning rate at `epoch`: k·η after the warm-up, rising linearly from η before."""
    k = workers * batch_per_worker / BASE_BATCH
    target = k * BASE_LR
    if epoch >= WARMUP_EPOCHS:
        return target
    return BASE_LR + (target - BASE_LR) * epoch / WARMUP_EPOCHS


@guarded
def check_learning_rate(fn) -> Feedback:
    """Check `fn(epoch, workers, batch_per_worker) -> learning rate` on every case."""
    for epoch, p, b in CASES:
        out, crash = call_student(fn, epoch, p, b)
        if crash:
            return crash
        value = parse_number(out)
        if value is None:
            return not_yet(f"for epoch {epoch:g}, {p} workers, batch {b} you returned {out!r}.",
                           "Return the learning rate as a float.")
        want = reference_lr(epoch, p, b)
        if not math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-12):
            return _hint(epoch, p, b, value, want)
    return correct(
        f"32 workers × 32 samples is a global batch of 1024, 4 times {BASE_BATCH}: the rate "
        f"rises from {BASE_LR:g} to {reference_lr(WARMUP_EPOCHS, 32, 32):g} over the first "
        f"{WARMUP_EPOCHS} epochs, then stays there."
    )


def _hint(epoch: float, p: int, b: int, value: float, want: float) -> Feedback:
    message = (f"at epoch {epoch:g} with {p} workers × {b} samples (global batch {p * b}) you "
               f"give {value:.4g}, the rule gives {want:.4g}.")
    k = p * b / BASE_BATCH
    warm = epoch < WARMUP_EPOCHS
    if math.isclose(value, k * BASE_LR) and warm:
        return not_yet(message, f"No warm-up: before epoch {WARMUP_EPOCHS} the rate rises "
                       f"linearly from {BASE_LR:g} to k·η. Large steps at the start diverge.")
    if warm and math.isclose(value, k * BASE_LR * epoch / WARMUP_EPOCHS, abs_tol=1e-12):
        return not_yet(message, f"Your warm-up starts at 0. Goyal et al. start at the tuned "
                       f"rate η = {BASE_LR:g} and rise from there to k·η.")
    if not warm and math.isclose(value, p * BASE_LR):
        return not_yet(message, "You scaled by the number of workers. Scale by the global "
                       f"batch over the batch η was tuned for: k = p·b / {BASE_BATCH}.")
    if not warm and math.isclose(value, b / BASE_BATCH * BASE_LR):
        return not_yet(message, "You used the batch of one worker. The update averages the "
                       "gradients of all p workers: the global batch is p·b.")
    if not warm and math.isclose(value, math.sqrt(k) * BASE_LR):
        return not_yet(message, "That is square-root scaling, another rule. Goyal et al. "
                       "scale linearly: k·η.")
    return not_yet(message, f"k = p·b / {BASE_BATCH}; after the warm-up the rate is k·η, "
                   f"before it η + (k·η − η)·epoch / {WARMUP_EPOCHS}.")

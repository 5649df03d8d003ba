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
import random

from workbench.exercises.feedback import Feedback, call_student, correct, guarded, not_yet
from workbench.exercises.own_work import refusing
from workbench.quiz.bank import parse_number

#: The rate that was tuned, and the global batch it was tuned for (Goyal et al.: 0.1 at 256),
#: and the warm-up: the defaults of the function the student writes.
BASE_LR, BASE_BATCH, WARMUP_EPOCHS = 0.1, 256, 5
GOYAL = (BASE_LR, BASE_BATCH, WARMUP_EPOCHS)
#: Another tuning the checker also tries, so that a constant where a parameter belongs fails.
OTHER = (0.2, 512, 3)

#: (epoch, workers, batch per worker, (η, B0, warm-up epochs)) cases the checker tries;
#: epochs may be fractional, and a global batch below B0 scales the rate down.
CASES = ((10.0, 8, 32, GOYAL), (10.0, 32, 32, GOYAL), (20.0, 4, 256, GOYAL),
         (0.0, 32, 32, GOYAL), (2.5, 32, 32, GOYAL), (4.0, 16, 64, GOYAL),
         (7.0, 1, 256, GOYAL), (1.0, 2, 256, GOYAL), (10.0, 2, 32, GOYAL),
         (1.5, 16, 128, OTHER), (6.0, 64, 32, OTHER))


def unseen_case() -> tuple[float, int, int, tuple[float, int, int]]:
    """A case drawn anew at each check: in the warm-up or after it (after it when the
    global batch is below B0, where Goyal et al.'s warm-up says nothing)."""
    rng = random.Random()
    base = (round(rng.uniform(0.01, 0.5), 3), rng.choice((128, 256, 512)), rng.randint(2, 8))
    p, b = rng.randint(2, 64), rng.choice((16, 32, 64, 128))
    low = p * b < base[1]
    epoch = round(rng.uniform(base[2] if low else 0, 2 * base[2]), 2)
    return epoch, p, b, base


@guarded
@refusing("workbench.exercises.references:learning_rate",
          "workbench.training.lab_hooks:warmup_lr", "workbench.training.lab_hooks:warmup_start")
def check_learning_rate(fn) -> Feedback:
    """Check `fn(epoch, workers, batch_per_worker, base_lr, base_batch, warmup_epochs) ->
    learning rate` on every case, and on one drawn at each check."""
    from workbench.exercises.references import learning_rate

    for epoch, p, b, base in (*CASES, unseen_case()):
        out, crash = call_student(fn, epoch, p, b, *base)
        if crash:
            return crash
        value = parse_number(out)
        if value is None:
            return not_yet(f"for epoch {epoch:g}, {p} workers, batch {b} you returned {out!r}.",
                           "Return the learning rate as a float.")
        want = learning_rate(epoch, p, b, *base)
        if not math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-12):
            return _hint(fn, epoch, p, b, base, value, want)
    return correct(
        f"32 workers × 32 samples is a global batch of 1024, 4 times {BASE_BATCH}: the rate "
        f"rises from {BASE_LR:g} to {learning_rate(WARMUP_EPOCHS, 32, 32, *GOYAL):g} over the "
        f"first {WARMUP_EPOCHS} epochs, then stays there; with another tuning, too."
    )


def _hint(fn, epoch: float, p: int, b: int, base: tuple[float, int, int], value: float,
          want: float) -> Feedback:
    eta, b0, warmup = base
    message = (f"at epoch {epoch:g} with {p} workers × {b} samples (global batch {p * b}), "
               f"η = {eta:g} tuned for {b0}, a {warmup}-epoch warm-up, you give {value:.4g}; "
               f"the rule gives {want:.4g}.")
    k = p * b / b0
    warm = epoch < warmup
    if base != GOYAL and _right_for(fn, GOYAL):
        return not_yet(message, "Right for η = 0.1, B0 = 256 and 5 epochs only: use the "
                       "parameters base_lr, base_batch and warmup_epochs, not those numbers.")
    if math.isclose(value, k * eta) and warm:
        return not_yet(message, f"No warm-up: before epoch {warmup} the rate rises "
                       f"linearly from η = {eta:g} to k·η. Large steps at the start diverge.")
    if warm and math.isclose(value, k * eta * epoch / warmup, abs_tol=1e-12) and \
            _starts_at_zero(fn, p, b, base):
        return not_yet(message, f"Your warm-up starts at 0. Goyal et al. start at the tuned "
                       f"rate η = {eta:g} and rise from there to k·η.")
    if not warm and math.isclose(value, p * eta):
        return not_yet(message, "You scaled by the number of workers. Scale by the global "
                       f"batch over the batch η was tuned for: k = p·b / {b0}.")
    if not warm and math.isclose(value, b / b0 * eta):
        return not_yet(message, "You used the batch of one worker. The update averages the "
                       "gradients of all p workers: the global batch is p·b.")
    if not warm and math.isclose(value, math.sqrt(k) * eta):
        return not_yet(message, "That is square-root scaling, another rule. Goyal et al. "
                       "scale linearly: k·η.")
    if not warm and k < 1 and math.isclose(value, eta):
        return not_yet(message, f"A global batch of {p * b}, below the {b0} that η was "
                       f"tuned for, scales the rate down too: k = {k:g}.")
    return not_yet(message, f"k = p·b / B0; after the warm-up the rate is k·η, "
                   f"before it η + (k·η − η)·epoch / {warmup}.")


def _right_for(fn, base: tuple[float, int, int]) -> bool:
    """Whether `fn` gives the rule's rate on every case with the tuning `base`."""
    from workbench.exercises.references import learning_rate

    for epoch, p, b, _ in CASES:
        out, crash = call_student(fn, epoch, p, b, *base)
        value = None if crash else parse_number(out)
        if value is None or not math.isclose(value, learning_rate(epoch, p, b, *base),
                                             rel_tol=1e-6, abs_tol=1e-12):
            return False
    return True


def _starts_at_zero(fn, p: int, b: int, base: tuple[float, int, int]) -> bool:
    """Whether `fn`'s rate at epoch 0 is 0 (a warm-up from 0, not another curve)."""
    out, crash = call_student(fn, 0.0, p, b, *base)
    value = None if crash else parse_number(out)
    return value is not None and abs(value) < 1e-12

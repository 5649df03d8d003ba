"""Exercise 9, the linear scaling rule: `learning_rate(epoch, workers, batch_per_worker,
base_lr, base_batch, warmup_epochs)`."""

import math

from mutants import accepted, refused


def _rule(epoch, p, b, eta, b0, warmup, scale=None, start=None, ramp=None):
    """The rule with one slip: `scale(p, b, b0)` gives k, `start` the warm-up's first rate."""
    k = scale(p, b, b0) if scale else p * b / b0
    target = k * eta
    if epoch >= warmup:
        return target
    first = eta if start is None else start
    return first + (target - first) * (ramp(epoch, warmup) if ramp else epoch / warmup)


@accepted()
def the_rule(epoch, workers, batch_per_worker, base_lr=0.1, base_batch=256, warmup_epochs=5):
    return _rule(epoch, workers, batch_per_worker, base_lr, base_batch, warmup_epochs)


@accepted()
def interpolated_with_min(epoch, workers, batch_per_worker, base_lr=0.1, base_batch=256,
                          warmup_epochs=5):
    k = workers * batch_per_worker / base_batch
    t = min(epoch / warmup_epochs, 1.0)
    return base_lr * ((1 - t) + t * k)


@refused("scaled by the number of workers")
def scales_by_workers(epoch, p, b, eta=0.1, b0=256, w=5):
    return _rule(epoch, p, b, eta, b0, w, scale=lambda p, b, b0: p)


@refused("batch of one worker")
def scales_by_one_workers_batch(epoch, p, b, eta=0.1, b0=256, w=5):
    return _rule(epoch, p, b, eta, b0, w, scale=lambda p, b, b0: b / b0)


@refused("square-root")
def square_root_scaling(epoch, p, b, eta=0.1, b0=256, w=5):
    return _rule(epoch, p, b, eta, b0, w, scale=lambda p, b, b0: (p * b / b0) ** 0.5)


@refused("No warm-up")
def no_warm_up(epoch, p, b, eta=0.1, b0=256, w=5):
    return p * b / b0 * eta


@refused("starts at 0")
def warm_up_from_zero(epoch, p, b, eta=0.1, b0=256, w=5):
    return _rule(epoch, p, b, eta, b0, w, start=0.0)


@refused("k = p·b / B0")
def a_geometric_warm_up(epoch, p, b, eta=0.1, b0=256, w=5):
    """Starts at η, but multiplies instead of adding."""
    return eta * (p * b / b0) ** (min(epoch, w) / w)


@refused("k = p·b / B0")
def warm_up_by_whole_epochs(epoch, p, b, eta=0.1, b0=256, w=5):
    return _rule(epoch, p, b, eta, b0, w, ramp=lambda e, w: math.floor(e) / w)


@refused("Right for η = 0.1, B0 = 256 and 5 epochs only", "use the parameters")
def the_papers_numbers_where_parameters_belong(epoch, p, b, eta=0.1, b0=256, w=5):
    return _rule(epoch, p, b, 0.1, 256, 5)


@refused("scales the rate down too")
def never_scales_down(epoch, p, b, eta=0.1, b0=256, w=5):
    return _rule(epoch, p, b, eta, b0, w) if p * b >= b0 else eta


_BY_HEART = {(10.0, 8, 32): 0.1, (10.0, 32, 32): 0.4, (20.0, 4, 256): 0.4, (0.0, 32, 32): 0.1,
             (2.5, 32, 32): 0.25, (4.0, 16, 64): 0.34, (7.0, 1, 256): 0.1, (1.0, 2, 256): 0.12}


@refused("the rule gives")
def the_cases_by_heart(epoch, p, b, eta=0.1, b0=256, w=5):
    return _BY_HEART.get((epoch, p, b), eta)


@refused("package's own", "Write it yourself")
def the_labs_warm_up(epoch, p, b, eta=0.1, b0=256, w=5):
    from workbench.training.lab_hooks import warmup_lr

    return warmup_lr(p * b / b0 * eta, epoch, w, eta)


@refused("package's own")
def the_checkers_reference(epoch, p, b, eta=0.1, b0=256, w=5):
    from workbench.exercises.references import learning_rate

    return learning_rate(epoch, p, b, eta, b0, w)


@refused("Return the learning rate as a float")
def in_words(epoch, p, b, eta=0.1, b0=256, w=5):
    return "about a tenth"

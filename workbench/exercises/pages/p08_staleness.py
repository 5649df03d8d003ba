"""Exercise 8: the staleness of asynchronous gradients."""

from workbench.notebooks import code, function_task, md

NAME = "08_staleness.ipynb"

CELLS = [
    md(r"""
# Exercise 8: the staleness of asynchronous gradients

**Goals.** After this exercise you can
- read a parameter server's log and say how old each applied gradient is,
- explain why a slow worker's gradients are the stalest,
- damp stale gradients with a staleness-aware learning rate.

**Time:** about 15 minutes.
"""),
    md(r"""
## Background

In asynchronous SGD a worker *pulls* the parameters, computes a gradient and *pushes* it;
the server applies it at once, making a new version of the parameters. The **staleness**
$\tau$ of a gradient counts the updates applied between its pull and its push:

$$\tau = \text{version when applied} - \text{version pulled}.$$

Below, a server's log: the version starts at 0 and each push adds one, after its gradient
is applied.
"""),
    code(r"""
from workbench.exercises import staleness as ex

print(ex.show_trace(ex.TRACE))
"""),
    md(r"""
## Task 1

Write `staleness_per_push(events)`: `events` is a list of `("pull", worker)` and
`("push", worker)` in time order; return the staleness of every push, in order.
"""),
    function_task(r'''
def staleness_per_push(events):
    """Return [staleness of each push], in the order of the pushes."""
    version, pulled, out = 0, {}, []
    for action, worker in events:
        if action == "pull":
            pulled[worker] = version  # the parameters this worker computes on
        else:
            out.append(version - pulled[worker])  # updates applied since its pull
            version += 1  # its own update comes after
    return out
'''),
    code("ex.check_staleness(staleness_per_push)"),
    md(r"""
## Task 2

Zhang et al. (IJCAI 2016) divide the learning rate by the staleness, so an old gradient
takes a smaller step; a fresh one ($\tau = 0$) keeps the base rate. Write
`staleness_lr(staleness, base_lr)`.
"""),
    function_task(r'''
def staleness_lr(staleness, base_lr):
    """The learning rate for a gradient of this staleness."""
    return base_lr / max(1, staleness)  # a fresh gradient keeps the base rate
'''),
    code("ex.check_staleness_lr(staleness_lr)"),
    md(r"""
## Summary

- Staleness counts the *updates* between a worker's pull and its push; pulls change
  nothing. Synchronous SGD has $\tau = 0$.
- A slow worker's gradients are the stalest: others update the model while it computes.
  More workers mean more staleness, about $N - 1$ on average.
- Staleness-aware SGD uses $\eta / \max(1, \tau)$. The parameter-server lab of notebook 03
  runs it with `staleness_aware=True`.
"""),
]

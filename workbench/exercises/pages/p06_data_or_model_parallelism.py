"""Exercise 6: data or model parallelism?"""

from workbench.notebooks import code, function_task, md

NAME = "06_data_or_model_parallelism.ipynb"

CELLS = [
    md(r"""
# Exercise 6: data or model parallelism?

**Goals.** After this exercise you can
- work out whether a model replica fits on one device,
- estimate the time of a gradient allreduce from the link bandwidth,
- choose between data and model parallelism from those numbers.

**Time:** about 20 minutes.
"""),
    md(r"""
## The rule for this exercise

1. **Memory.** A plain data-parallel replica (Horovod, DDP) needs its training state,
   `params × state_bytes_per_param` bytes (weights, gradients and optimizer state), plus
   `activations_gb`. If that exceeds `device_memory_gb`, choose **model** parallelism, or
   **sharded** data parallelism (ZeRO-3, Rajbhandari et al. 2020; FSDP, Zhao et al. 2023)
   when $1/p$ of the training state plus the activations fits: each of the $p$ devices keeps
   only its shard and gathers each layer's weights just before using it. Either answer is
   right then.
2. **Communication.** Otherwise a ring allreduce of the fp32 gradients ($n$ = 4 bytes per
   parameter) takes $2\frac{p-1}{p} \cdot n / B$ seconds on links of $B$ bytes/s. If that is
   at most `compute_s`, choose **data** parallelism.
3. Otherwise choose **model** parallelism only if it sends less: $2 \times$
   `cut_activations_mb` (forward and backward) over the same link.

Careful with units: links are quoted in Gbit/s, and 1 Gbit/s is $10^9 / 8$ bytes/s. Sizes are
decimal: 1 GB = $10^9$ bytes, 1 MB = $10^6$ bytes.
"""),
    code(r"""
from workbench.exercises import parallelism as ex

for scenario in ex.SCENARIOS:
    print(ex.describe(scenario), end="\n\n")
"""),
    md(r"""
## Your task

Write `choose(s)` returning `"data"`, `"model"` or `"sharded"` for a scenario `s`. Its fields are
`s.params`, `s.state_bytes_per_param`, `s.activations_gb`, `s.device_memory_gb`,
`s.workers`, `s.link_gbit_s`, `s.compute_s` and `s.cut_activations_mb`.
"""),
    function_task(r'''
def choose(s):
    """Return "data", "model" or "sharded" for scenario s, following the rule above."""
    memory_gb = s.params * s.state_bytes_per_param / 1e9 + s.activations_gb
    if memory_gb > s.device_memory_gb:  # a whole replica does not fit on one device
        shard_gb = s.params * s.state_bytes_per_param / 1e9 / s.workers + s.activations_gb
        return "sharded" if shard_gb <= s.device_memory_gb else "model"
    bytes_per_s = s.link_gbit_s * 1e9 / 8  # bits to bytes
    gradient_bytes = 4 * s.params  # fp32 gradients
    allreduce_s = 2 * (s.workers - 1) / s.workers * gradient_bytes / bytes_per_s
    if allreduce_s <= s.compute_s:
        return "data"  # not communication-bound: the simpler choice
    model_parallel_s = 2 * s.cut_activations_mb * 1e6 / bytes_per_s
    return "model" if model_parallel_s < allreduce_s else "data"
'''),
    code("ex.check_parallelism_choice(choose)"),
    md("Once you pass, compare your reasoning with the deciding numbers:"),
    code("print(ex.numbers_table())"),
    md(r"""
## Summary

- Memory decides first: plain data parallelism needs a whole replica, with its gradients,
  optimizer state and activations, on every device; sharded data parallelism (ZeRO-3, FSDP)
  needs $1/p$ of the training state plus the activations, for about 1.5 times the traffic.
- When a replica fits, data parallelism is simpler and usually wins, unless its gradient
  allreduce outlasts the compute and model parallelism would send less.
- Bits are not bytes: a 10 Gbit/s link moves 1.25 GB/s.
- Large systems combine them: tensor parallelism (each layer split) inside a server with a
  fast bus, pipeline and data parallelism across servers.
"""),
]

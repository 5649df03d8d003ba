"""Where a job runs: this host's CPU budget (`cpu.py`), and the hosts a job asks for, as a
`--hosts` list or Slurm options (`lists.py`). How jobs share the host's cores is decided
when they launch, in `workbench/launch/cores.py`.

Lessons it serves: notebooks/06_speedup_efficiency_scalability.ipynb (a rank's share of the
cores decides its speedup).
"""

from workbench.hosts.cpu import CpuBudget, cpu_budget

__all__ = ["CpuBudget", "cpu_budget"]

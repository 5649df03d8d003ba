"""What this host gives a job: its CPU budget (`cpu.py`). How jobs share the host's cores is
decided when they launch, in `workbench/jobs/cores.py`.

Lessons it serves: notebooks/06_speedup_efficiency_scalability.ipynb (a rank's share of the
cores decides its speedup).
"""

from workbench.hosts.cpu import CpuBudget, cpu_budget

__all__ = ["CpuBudget", "cpu_budget"]

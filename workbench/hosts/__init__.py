"""What this host gives a job: the CPU budget (`cpu.py`) and how cores are shared (`cores.py`)."""

from workbench.hosts.cpu import CpuBudget, cpu_budget

__all__ = ["CpuBudget", "cpu_budget"]

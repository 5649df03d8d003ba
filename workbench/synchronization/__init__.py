"""Synchronization: synchronous vs asynchronous SGD, stragglers, Hogwild!, ring allreduce.

Lessons it serves: notebooks/03_synchronization.ipynb and notebooks/04_collectives.ipynb
(the ring allreduce).
"""

"""Synchronization: synchronous vs asynchronous SGD, stragglers, Hogwild!, ring allreduce,
Horovod's negotiation cycle.

Lessons it serves: notebooks/02_data_parallelism_horovod.ipynb (the negotiation),
notebooks/03_synchronization.ipynb and notebooks/04_collectives.ipynb (the ring allreduce).
"""

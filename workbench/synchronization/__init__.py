"""Synchronization: synchronous vs asynchronous SGD, stragglers, Hogwild!, ring allreduce."""

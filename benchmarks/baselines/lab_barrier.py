"""The smallest lab worker: join the gloo group (done by the supervisor), meet at a barrier.

Lives in its own importable module because lab workers are started in fresh interpreters,
which import the function by name.
"""

import torch.distributed as dist


def barrier(rank: int, world: int) -> int:
    """Meet the other workers once; return this worker's rank."""
    dist.barrier()
    return rank

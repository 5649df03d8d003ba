"""Ring allreduce from scratch: a reduce-scatter, then an allgather, around a ring of workers.

Every worker holds a vector of the same length (its gradient); afterwards every worker holds
the element-wise **sum** of all of them. The ring algorithm (P. Patarasuk and X. Yuan,
"Bandwidth optimal all-reduce algorithms for clusters of workstations", J. Parallel Distrib.
Comput. 69(2), 2009; the algorithm behind Baidu's allreduce, Horovod and NCCL) cuts the
vector into p chunks and arranges the p workers in a ring: worker r only ever sends to
r+1 and receives from r−1.

1. **Reduce-scatter** (p−1 steps). In each step every worker sends one chunk to its right
   neighbour and adds the chunk arriving from its left neighbour into its own copy. After
   p−1 steps, worker r holds the complete sum of chunk (r+1) mod p.
2. **Allgather** (p−1 steps). The completed chunks travel once more around the ring, each
   worker overwriting its copy, until every worker has every summed chunk.

Cost in the α–β model (α: seconds per message, β: seconds per byte, γ: seconds per byte
added, n: bytes of the vector)::

    T_ring = 2(p−1)·α + 2·(p−1)/p·n·β + (p−1)/p·n·γ

Each worker sends 2(p−1) messages of n/p bytes, 2·(p−1)/p·n in all. The ring is
bandwidth-optimal because any allreduce must send and receive at least that much per node,
and the ring meets the bound with every link equally loaded (a parameter-server worker also
sends about 2n, but the server's link carries 2pn). Its weakness is the latency term,
which grows with p.
(:func:`workbench.scaling.costmodel.ring_allreduce_time` computes it.)

The core function :func:`ring_allreduce` knows nothing about processes or networks: it gets
the transport as two functions, ``send`` and ``recv``. :func:`dist_ring_allreduce` binds it
to ``torch.distributed`` point-to-point messages, :func:`thread_ring_allreduce` to queues
between threads (handy to experiment with in a notebook cell, without processes).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

#: ``send(tensor, dst)`` starts sending ``tensor`` to worker ``dst``. It may return at once
#: (a handle with ``.wait()``, e.g. what ``torch.distributed.isend`` returns) or None.
SendFn = Callable[[torch.Tensor, int], Any]
#: ``recv(tensor, src)`` blocks until a message from worker ``src`` has filled ``tensor``.
RecvFn = Callable[[torch.Tensor, int], Any]


def ring_allreduce(tensor: torch.Tensor, rank: int, size: int,
                   send: SendFn, recv: RecvFn) -> torch.Tensor:
    """Sum ``tensor`` over ``size`` workers in place, with the ring algorithm; return it.

    Args:
        tensor: this worker's contiguous vector (any shape; every worker the same shape).
        rank: this worker's position in the ring, 0 ≤ rank < size.
        size: number of workers p.
        send, recv: the transport (see :data:`SendFn`, :data:`RecvFn`). ``send`` must not
            wait for the matching ``recv`` to start — every worker sends before it receives,
            so a blocking send would deadlock the ring.
    """
    if size == 1:
        return tensor
    right, left = (rank + 1) % size, (rank - 1) % size
    chunks = list(tensor.view(-1).tensor_split(size))  # views into tensor, sizes differ by ≤ 1

    # 1. Reduce-scatter: in step s, send chunk (rank − s) and add the incoming chunk (rank − s − 1).
    for step in range(size - 1):
        out_idx, in_idx = (rank - step) % size, (rank - step - 1) % size
        incoming = torch.empty_like(chunks[in_idx])
        _exchange(send, recv, chunks[out_idx], right, incoming, left)
        chunks[in_idx] += incoming
    # Now chunks[(rank + 1) % size] holds the full sum.

    # 2. Allgather: in step s, pass on chunk (rank + 1 − s) and receive chunk (rank − s).
    for step in range(size - 1):
        out_idx, in_idx = (rank + 1 - step) % size, (rank - step) % size
        _exchange(send, recv, chunks[out_idx], right, chunks[in_idx], left)
    return tensor


def _exchange(send: SendFn, recv: RecvFn, out: torch.Tensor, dst: int,
              into: torch.Tensor, src: int) -> None:
    """Send ``out`` to ``dst`` while receiving ``into`` from ``src`` (one ring step).

    Empty chunks (vectors shorter than the ring) are skipped on both sides alike.
    """
    handle = send(out, dst) if out.numel() else None
    if into.numel():
        recv(into, src)
    if handle is not None:
        handle.wait()


# --- transports ----------------------------------------------------------------------------

def dist_ring_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    """Ring-allreduce ``tensor`` (sum, in place) over the default ``torch.distributed`` group.

    ``isend`` returns at once, so all workers can send before they receive.
    """
    import torch.distributed as dist

    return ring_allreduce(tensor, dist.get_rank(), dist.get_world_size(),
                          send=lambda t, dst: dist.isend(t.contiguous(), dst),
                          recv=lambda t, src: dist.recv(t, src))


def thread_ring_allreduce(tensors: Sequence[torch.Tensor],
                          watch: Callable[[int, torch.Tensor, torch.Tensor], Any] | None = None,
                          ) -> list[torch.Tensor]:
    """Ring-allreduce a list of tensors, one per simulated worker, using threads and queues.

    Returns new tensors (the inputs are left unchanged). The algorithm is the very same
    :func:`ring_allreduce`; only the transport differs: one queue per (src, dst) link.
    ``watch(rank, chunk, whole)``, if given, is called by worker ``rank`` as it sends
    ``chunk`` (a view into its vector ``whole``), before anything of that step arrives.
    """
    size = len(tensors)
    work = [t.detach().clone() for t in tensors]
    links = {(s, d): queue.Queue() for s in range(size) for d in range(size)}
    errors: list[BaseException] = []

    def worker(rank: int) -> None:
        def send(t: torch.Tensor, dst: int) -> None:
            if watch is not None:
                watch(rank, t, work[rank])
            links[(rank, dst)].put(t.clone())  # a copy: the sender may change t afterwards

        def recv(t: torch.Tensor, src: int) -> None:
            t.copy_(links[(src, rank)].get(timeout=30))

        try:
            ring_allreduce(work[rank], rank, size, send, recv)
        except BaseException as exc:  # surfaced in the caller's thread below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return work


def chunk_lengths(numel: int, size: int) -> list[int]:
    """Elements in each of the ring's `size` chunks of a vector of `numel`, as
    ``tensor_split`` cuts it: the first ``numel % size`` chunks one element longer."""
    return [numel // size + (c < numel % size) for c in range(size)]


def ring_trace(size: int, numel: int, element_size: int = 4) -> list[dict[str, Any]]:
    """The ring all-reduce of `size` workers, step by step, as :func:`ring_allreduce` runs.

    It runs the function itself, on threads, over vectors of one element per chunk: worker
    r's holds 2**r, so the number in each chunk says whose contributions it has summed.
    Frame 0 is the start, frame k the state after step k (steps 1 … p−1 reduce-scatter,
    p … 2(p−1) all-gather). Each frame: ``phase``, ``step``, ``sends`` (one
    ``(src, dst, chunk, bytes)`` per worker, for a vector of `numel` values of
    `element_size` bytes) and ``holds[r][c]``, the workers whose chunk c worker r has summed.
    """
    if not 2 <= size <= 30:
        raise ValueError(f"a traced ring needs 2 to 30 workers, got {size}")
    lengths = chunk_lengths(numel, size)
    sent: list[list[int]] = [[] for _ in range(size)]      # chunk sent, per worker and step
    before: list[list[list[frozenset[int]]]] = [[] for _ in range(size)]

    def watch(rank: int, chunk: torch.Tensor, whole: torch.Tensor) -> None:
        sent[rank].append(chunk.storage_offset() - whole.storage_offset())
        before[rank].append(_summed(whole))

    start = [torch.full((size,), float(2 ** r), dtype=torch.float64) for r in range(size)]
    after = [_summed(t) for t in thread_ring_allreduce(start, watch)]
    frames = []
    for k in range(2 * size - 1):
        sends = [] if k == 0 else [
            (r, (r + 1) % size, sent[r][k - 1], lengths[sent[r][k - 1]] * element_size)
            for r in range(size)]
        phase = "start" if k == 0 else "reduce-scatter" if k < size else "all-gather"
        holds = [before[r][k] if k < len(before[r]) else after[r] for r in range(size)]
        frames.append({"phase": phase, "step": k, "sends": sends, "holds": holds})
    return frames


def _summed(whole: torch.Tensor) -> list[frozenset[int]]:
    """Per chunk of a traced vector (one element each), the workers summed into it."""
    return [frozenset(r for r in range(len(whole)) if int(v) >> r & 1) for v in whole.tolist()]


def bytes_sent_per_worker(numel: int, size: int, element_size: int = 4) -> int:
    """Bytes one worker sends in a ring allreduce of ``numel`` elements: 2·(p−1) chunks.

    Exact for uneven chunks too; worker 0's count is returned (all differ by ≤ 2 elements).
    """
    if size == 1:
        return 0
    lengths = chunk_lengths(numel, size)
    sent = 0
    for step in range(size - 1):
        sent += lengths[(0 - step) % size] + lengths[(1 - step) % size]
    return sent * element_size

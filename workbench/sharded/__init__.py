"""Sharded data parallelism: every rank keeps only its shard of the training state.

Data parallelism as in notebook 02 keeps a whole replica on every rank: the parameters,
their gradients and the optimizer's state (Adam: two more numbers per parameter). ZeRO
(Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC 2020, arXiv:1910.02054) removes the copies stage by stage, with the same
arithmetic (so N ranks with batch b still follow one process with batch N·b):

- `zero1.py`, ZeRO-1 (P_os): each rank keeps the optimizer state of its shard only, steps
  that shard, and the ranks all-gather the updated parameters.
- `zero2.py`, ZeRO-2 (P_os+g): the gradients are reduce-scattered, so each rank also keeps
  only its shard's gradients.
- `fsdp.py`, ZeRO-3 (P_os+g+p): the parameters are sharded too, gathered layer by layer
  when needed. PyTorch's own FSDP2 (`torch.distributed.fsdp.fully_shard`, which shards
  each parameter on its dim 0; FSDP1 is Zhao et al., "PyTorch FSDP", VLDB 2023,
  arXiv:2304.11277), not a copy written here.

Both ZeRO stages keep the parameters in one flat buffer (`flat.py`), cut into N equal
slices: rank r owns slice r. `memory.py` counts the bytes a rank holds, `traffic.py` the
bytes it sends, and `costmodel.py` predicts both and plans what fits.

Lessons it serves: notebooks/07_sharded_data_parallelism.ipynb and
notebooks/exercises/12_zero1_optimizer_step.ipynb.
"""

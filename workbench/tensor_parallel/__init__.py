"""Tensor parallelism: one layer's matrices split across ranks (Shoeybi et al. 2019).

- `megatron.py`: Megatron-LM's MLP split written by hand: the first linear split by
  columns, the second by rows, and the two conjugate operators f and g as autograd
  functions;
- `library.py`: the same split done by PyTorch's DTensor (`parallelize_module` with
  `ColwiseParallel` / `RowwiseParallel`), to see what the library does for us;
- `traffic.py`: the bytes tensor parallelism all-reduces per block and per step, and what
  they cost on NVLink and on a 25 Gbit/s network (the simulator's presets);
- `check.py`: the run on N real ranks that compares both with the unsharded layer, and a
  2-D layout (data parallel × tensor parallel on a device mesh) with the serial run.

Lessons it serves: notebooks/08_tensor_parallelism_buckets_accumulation.ipynb.
"""

"""Data parallelism made fast by hand, one idea at a time, beside the naive engine.

- naive (workbench/training/naive_rank.py): each gradient all-reduced, one tensor at a
  time, after `backward()` has returned;
- `bucketed.py`: gradients packed into buckets of `bucket_mb` MiB, one all-reduce per
  bucket, still after `backward()`: fewer messages, the latency term paid per bucket;
- `overlapped.py`: each bucket's all-reduce started asynchronously, from a hook, as soon as
  its last gradient is ready during `backward()`, and waited for before the step: the
  communication hides behind the rest of the backward pass;
- DDP (workbench/training/ddp_rank.py) does both, in C++ (Li et al., VLDB 2020).

`buckets.py` holds what both share: how gradients are packed into buckets.

Lessons it serves: notebooks/08_tensor_parallelism_buckets_accumulation.ipynb (buckets and
overlap) and notebooks/exercises/13_overlap_the_all_reduce.ipynb.
"""

"""Baseline for start-up latency: import torch, join Horovod, report the time. Nothing else."""

import os
import sys
import time

import horovod.torch as hvd
import torch  # noqa: F401

hvd.init()
with open(os.path.join(sys.argv[1], f"ready{hvd.rank()}"), "w") as f:
    f.write(repr(time.time()))

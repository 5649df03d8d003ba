"""The training loop a rank runs (loop.py), what it builds first (setup.py), what each
engine adds (synchronizer.py), what a run keeps (results.py), and one rank module per
engine (docs/ARCHITECTURE.md). Lessons it serves: notebooks/01_sgd_from_scratch.ipynb and
notebooks/02_data_parallelism_horovod.ipynb (which prints its rank modules).
"""

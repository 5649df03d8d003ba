"""The training loop a rank runs (loop.py: `train`, `train_step`), what it builds first
(setup.py), what each engine adds (synchronizer.py), the held-out evaluation
(evaluation.py), and one rank module per engine. Lessons 01 and 02 read it.
"""

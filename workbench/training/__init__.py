"""The training loop a rank runs (loop.py) and one rank module per engine."""

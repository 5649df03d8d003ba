"""The training loop a rank runs (loop.py), what it builds first (setup.py), what each
engine adds (synchronizer.py), what a run keeps (results.py), and one rank module per
engine; lessons 01 and 02 read them (docs/ARCHITECTURE.md)."""

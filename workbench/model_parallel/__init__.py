"""Model parallelism: pipelines over processes, and data vs model parallelism side by side.

Lessons it serves: notebooks/05_types_of_parallelism.ipynb and
notebooks/exercises/05_pipeline_bubble.ipynb.
"""

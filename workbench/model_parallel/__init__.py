"""Model parallelism: pipelines over processes, and data vs model parallelism side by side."""

"""Job submission: the queue, its records and the confinement of job options (the worker side is training.jobs)."""

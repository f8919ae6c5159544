"""Retrain and reindex as queued jobs: queue (contract), records, tasks, worker, cli."""

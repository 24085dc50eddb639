"""The model's worker processes and the pool that hands them sessions and jobs."""

"""Rollouts: generation backends (local engine), the agent loop with save points, and the scheduler."""

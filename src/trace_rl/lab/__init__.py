"""The allocation lab: a known-truth simulator of multi-turn tasks, its predictors, and the paper's claims.

See docs/lab.md for the task family's law and the reasoning behind its parameters.
"""

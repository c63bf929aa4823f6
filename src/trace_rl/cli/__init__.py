"""The `trace-rl` command line: the one place that maps config names to classes."""

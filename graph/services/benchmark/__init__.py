"""Benchmarks: a published protocol run as tradegraph backtests and scored beside the rows its authors published."""

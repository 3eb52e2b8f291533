"""Services around the machine: replay, backtests, sweeps, the benchmark, telemetry, the portfolio view."""

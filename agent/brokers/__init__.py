"""Real brokers behind the execution seam (graph/machine/cycle_context.py ExecutionBackend): Alpaca paper trading through
the official alpaca-py SDK (an optional extra, `pip install tradegraph[broker]`), the settings that choose it, the
mandate every order must fit, and the client order ids that make a submit happen once."""


class BrokerConfigError(ValueError):
    """A bad broker setting or mandate: one line naming it (exit 2, before any model call)."""

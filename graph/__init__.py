"""The graph: state, one module per node, the builder, the runner, audit, replay and the CLI."""

"""The machine: the state graph, its nodes, state, run context, audit and the runner of one cycle."""

"""The machine: the state graph, its nodes, state, runtime, audit and the runner of one cycle."""

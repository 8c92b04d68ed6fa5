"""World-model backends behind the contract topics: plugin API, session, node, GE-Sim wire and server, training."""

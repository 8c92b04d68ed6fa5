"""The policy host: plugin API, built-in policies, observation inputs, node."""

"""Tools: a synthetic G2, a topic monitor, the contract demo."""

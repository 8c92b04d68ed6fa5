"""Per-episode agreement: metrics, image metrics, store, comparison, node, report."""

"""The backend switch: what it decides (logic) and the node that relays and validates."""

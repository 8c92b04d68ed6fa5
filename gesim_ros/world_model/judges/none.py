"""Judge ``none``: no judge, whatever the backend. Every episode's outcome is unknown, reported as
soon as the episode ends; the comparison counts it unjudged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gesim_ros.world_model.api import WorldModel, WorldModelInputError


def no_judge(config: Mapping[str, Any], backend: WorldModel | None) -> None:
    """None (no judge); it takes no config."""
    if config:
        raise WorldModelInputError(f"config: judge 'none' takes no keys, got {sorted(config)}; pass {{}}")
    return None

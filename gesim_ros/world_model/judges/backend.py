"""Judge ``backend``: the episode's backend judges its own rollouts (``learned`` reads the scene it
imagined behind the frames). With a backend that is no Judge it means no judge (outcome unknown),
so it is a safe default for any backend."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gesim_ros.world_model.api import Judge, WorldModel, WorldModelInputError


def backend_judge(config: Mapping[str, Any], backend: WorldModel | None) -> Judge | None:
    """``backend`` itself when it is a Judge, else None; it takes no config (the backend has its own)."""
    if config:
        raise WorldModelInputError(f"config: judge 'backend' takes no keys, got {sorted(config)}; configure the "
                                   "backend itself (backend_config), or pass {}")
    return backend if isinstance(backend, Judge) else None

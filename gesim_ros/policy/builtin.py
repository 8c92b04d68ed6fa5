"""The built-in policy plugins (entry-point group ``gesim_ros.policies``): ``module`` (any
``package.module:factory``), ``torchscript`` (a ``torch.jit`` file) and ``scripted`` (the twin's
scripted controllers). Each is a Policy of the plugin API in ``gesim_ros.policy.api``."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gesim_ros.policy.api import IMAGES, STATE, Policy, PolicyError, lerobot_batch


def policy_from_factory(config: Mapping[str, Any]) -> Policy:
    """The ``module`` plugin: ``{"factory": "package.module:callable", **kwargs}`` -> callable(**kwargs)."""
    config = dict(config)
    target = config.pop("factory", None)
    if not isinstance(target, str) or target.count(":") != 1:
        raise PolicyError(f"module policy: policy_config 'factory' is {target!r}; set it to "
                          "'package.module:callable' (the callable returns a Policy)")
    module_name, attr = target.split(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise PolicyError(f"module policy: cannot load '{target}' ({type(exc).__name__}: {exc}); check the name "
                          "and that the module is on PYTHONPATH of the policy process") from None
    try:
        return factory(**config)
    except PolicyError:
        raise
    except Exception as exc:
        raise PolicyError(f"module policy: {target}(**{config}) raised {type(exc).__name__}: {exc}") from exc


class TorchScriptPolicy(Policy):
    """The ``torchscript`` plugin: a ``torch.jit`` file called as ``module(state, *images)``.

    ``state`` is (1, 16) float32; one (1, 3, H, W) float32 image in [0, 1] follows per entry of
    ``cameras``, in that order. The module returns (H, 16) or (1, H, 16) absolute targets.
    """

    def __init__(self, path: str, chunk_horizon: int = 1, control_period_s: float = 0.1,
                 cameras: Iterable[str] = (), device: str = "cpu"):
        import torch

        if not Path(path).is_file():
            raise PolicyError(f"torchscript policy: '{path}' is not a file; set policy_config "
                              '{"path": "/abs/path/policy.pt"} to a file saved with torch.jit.save')
        try:
            self.module = torch.jit.load(path, map_location=device).eval()
        except Exception as exc:
            raise PolicyError(f"torchscript policy: torch.jit.load('{path}') failed: {exc}") from None
        self.chunk_horizon, self.control_period_s, self.device = chunk_horizon, control_period_s, device
        self.image_keys = tuple(IMAGES + c for c in cameras)
        self.observation_keys = (STATE, *self.image_keys)

    def act(self, observation):
        import torch

        batch = lerobot_batch({k: observation[k] for k in self.observation_keys}, self.device)
        with torch.inference_mode():
            out = self.module(batch[STATE], *(batch[k] for k in self.image_keys))
        if not isinstance(out, torch.Tensor):
            raise PolicyError(f"torchscript policy returned {type(out).__name__}; expected a tensor "
                              f"({self.chunk_horizon}, 16) or (1, {self.chunk_horizon}, 16)")
        return out


class ScriptedPolicy(Policy):
    """The ``scripted`` plugin: the twin's scripted controller for the episode's task and seed.

    It plans the open-loop trajectory at reset from (task, seed, failure_rate), exactly as the twin's
    own demonstrations do, and replays it chunk after chunk (holding the last targets once it ends):
    by plan step, not by wall time, so a late first chunk or a slow control loop never skips part of
    the trajectory (a skip would be a jump the switch rightly refuses). A scripted run through the
    policy node thus reproduces the twin's ground-truth behaviour, injected failures included.
    """

    def __init__(self, failure_rate: float = 0.0, chunk_horizon: int = 10, control_hz: float = 30.0):
        try:
            self.controllers = importlib.import_module("gesim_ros.twin.controllers")
        except ImportError as exc:
            raise PolicyError(f"scripted policy: gesim_ros.twin.controllers is not importable ({exc}); "
                              "it needs the MuJoCo twin's requirements (requirements-workstation.txt)") from None
        self.failure_rate, self.chunk_horizon, self.control_hz = failure_rate, chunk_horizon, control_hz
        self.controller = None
        self.next_step = 0

    def reset(self, episode):
        self.controller = self.controllers.make_controller(episode.task, episode.seed, self.failure_rate,
                                                           control_hz=self.control_hz)
        self.control_period_s = self.controller.period_s
        self.next_step = 0

    def act(self, observation):
        chunk = self.controller.chunk(self.next_step, self.chunk_horizon)
        self.next_step += self.chunk_horizon
        return chunk

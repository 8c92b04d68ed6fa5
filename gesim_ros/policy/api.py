"""Plugin interface for policies driven by the `policy` node, and for labs' episode success checkers.

A policy sees one observation dict per decision, in LeRobot's batch key conventions (so a LeRobot
policy needs only a thin wrapper), and returns an action chunk of absolute joint targets. It never
learns which backend (robot, twin, world model) produced the observation: that is the point of the
sim2real comparison. Plain Python and numpy; torch is imported only by the TorchScript plugin and
``lerobot_batch``.

Observation (built by :func:`build_observation`; the node fills only what ``observation_keys`` asks):

* ``observation.images.<camera>``: (H, W, 3) uint8 RGB, one per contract colour camera key
  (``head_color``, ``hand_left_color``, ...);
* ``observation.state``: (16,) float32 action-joint positions in contract order [L7, R7, Lgrip, Rgrip]
  (``Contract.arm_joint_names``);
* ``observation.tactile.<side>``: (rows, cols, 3) float32 taxels [normal, shear_x, shear_y] in mN;
* ``observation.imu``: (10,) float32 [orientation x, y, z, w, angular velocity xyz, linear accel. xyz];
* ``task``: the task instruction text; ``episode``: {episode_id, task, seed, time_s} where ``time_s``
  counts from the episode's start.

Action chunk: (chunk_horizon, 16) absolute targets in the same joint order, one row per
``control_period_s``; (1, chunk_horizon, 16) is accepted too. Anything else (wrong shape, NaN/inf, an
exception) becomes a :class:`PolicyError` and fails that episode, never the node.

Plugins are found by name in the entry-point group ``gesim_ros.policies``; each entry point names a
factory ``config dict -> Policy`` (``MyPolicy.from_config`` works). Shipped (``gesim_ros.policy.builtin``):
``scripted`` (the twin's scripted controllers), ``torchscript`` (a ``torch.jit`` file) and ``module``
(any ``module:factory``).

Wrapping a LeRobot-style policy (``select_action(batch)`` returns the next (1, D) action; LeRobot
keeps its own action queue, so the chunk horizon is 1 and the period is the dataset's 1/fps)::

    # my_lab/g2_policy.py, run with: policy:=module
    #   policy_config:='{"factory": "my_lab.g2_policy:make", "path": "my_lab/act_g2"}'
    import torch
    from lerobot.policies.act.modeling_act import ACTPolicy
    from gesim_ros.policy.api import Policy, lerobot_batch

    class LeRobotPolicy(Policy):
        control_period_s, chunk_horizon = 1 / 30, 1
        observation_keys = ("observation.state", "observation.images.head_color")

        def __init__(self, path):
            self.policy = ACTPolicy.from_pretrained(path).eval()

        def reset(self, episode):
            self.policy.reset()  # clears LeRobot's action queue

        def act(self, observation):
            batch = lerobot_batch(observation, rename={"observation.images.head_color":
                                                       "observation.images.top_head"})
            with torch.inference_mode():
                return self.policy.select_action(batch).numpy()

    def make(path):
        return LeRobotPolicy(path)

The policy's state and action must use the 16 action joints in contract order; a model trained on
another layout re-orders them in ``act`` (``world_model_api.ActionLayout`` converts by joint name).
"""

from __future__ import annotations

import importlib.metadata
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gesim_ros.contract.contract import Contract, TopicSpec
from gesim_ros.plugins import UnknownPluginError as UnknownPluginError  # public: the loaders raise it
from gesim_ros.plugins import available, load_entry_point

POLICY_GROUP = "gesim_ros.policies"
CHECKER_GROUP = "gesim_ros.success_checkers"

STATE = "observation.state"
IMAGES = "observation.images."
TACTILE = "observation.tactile."
IMU = "observation.imu"
TASK = "task"
EPISODE = "episode"
IMU_FIELDS = 10


class PolicyError(RuntimeError):
    """A policy or its input failed for one episode; ``reason`` says what and how to fix it.

    ``label`` becomes the EpisodeEvent label, so failures caused by the policy are told apart from
    failures caused by what a backend sent it.
    """

    label = "policy_error"

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ObservationError(PolicyError):
    """An observation is malformed (NaN joint states, a missing joint, an undecodable image)."""

    label = "bad_observation"


@dataclass(frozen=True)
class EpisodeInfo:
    """What a policy is told at an episode's start (deliberately not the backend mode)."""

    episode_id: str
    task: str
    task_text: str
    seed: int


@dataclass(frozen=True)
class Verdict:
    """A success checker's decision for the running episode."""

    success: bool
    label: str = ""
    reason: str = ""


class _Plugin(ABC):
    #: the observation entries this plugin reads; the node subscribes only their topics.
    observation_keys: tuple[str, ...] = (STATE,)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]):
        """Build from a config dict of constructor keyword arguments (policy_config JSON)."""
        try:
            return cls(**dict(config))
        except TypeError as exc:
            raise PolicyError(f"config for {cls.__name__}: {exc}; pass the constructor's keyword "
                              f"arguments as JSON keys") from None


class Policy(_Plugin):
    """A policy plugin. The node calls ``reset`` at each episode start and then ``act`` once every
    ``chunk_horizon * control_period_s`` (it reads both after ``reset``, so a policy may set them
    per episode); each chunk runs open loop until the next one replaces it."""

    control_period_s: float = 0.1
    chunk_horizon: int = 1

    def reset(self, episode: EpisodeInfo) -> None:
        """Clear per-episode state; the default keeps none."""

    @abstractmethod
    def act(self, observation: Mapping[str, Any]) -> Any:
        """Return a (chunk_horizon, 16) array (or tensor) of absolute joint targets."""


class SuccessChecker(_Plugin):
    """A lab's success checker (entry-point group ``gesim_ros.success_checkers``), used by the
    episode runner. It sees the same observation dict as a policy, from the robot side (the world
    model's side when the run is in world_model mode), every ``check_period_s``."""

    check_period_s: float = 0.5

    def reset(self, episode: EpisodeInfo) -> None:
        """Clear per-episode state; the default keeps none."""

    @abstractmethod
    def check(self, observation: Mapping[str, Any]) -> Verdict | None:
        """Return a Verdict once the outcome is known, else None."""


# --------------------------------------------------------------------------- observations


def observation_topics(contract: Contract, keys: Iterable[str]) -> dict[str, TopicSpec]:
    """The contract topic behind each observation key; a bad key fails naming the fix."""
    from gesim_ros.contract.image_codec import COLOUR_ENCODINGS  # here, so a lab's policy module needs no OpenCV

    topics = {}
    for key in keys:
        if key == STATE:
            topics[key] = contract.topic("joint_states")
        elif key == IMU:
            topics[key] = contract.topic("imu")
        elif key.startswith(IMAGES):
            camera = key[len(IMAGES):]
            colour = [t.key for t in contract.cameras if t.encoding in COLOUR_ENCODINGS]
            if camera not in colour:
                raise PolicyError(f"observation key '{key}': '{camera}' is not a colour camera of contract "
                                  f"{contract.profile}; use one of {', '.join(IMAGES + c for c in colour)}")
            topics[key] = contract.topic(camera)
        elif key.startswith(TACTILE) and f"tactile_{key[len(TACTILE):]}" in contract.topics:
            topics[key] = contract.topic(f"tactile_{key[len(TACTILE):]}")
        else:
            raise PolicyError(f"observation key '{key}' is not one gesim_ros provides; use {STATE}, {IMU}, "
                              f"{IMAGES}<camera> or {TACTILE}<left|right>")
    return topics


def build_observation(state, images: Mapping[str, Any] | None = None, tactile: Mapping[str, Any] | None = None,
                      imu=None, task: str = "", episode: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The observation dict a policy receives, checked: finite float32 state and sensors, uint8 RGB images."""
    obs: dict[str, Any] = {STATE: _finite_array(STATE, state, ndim=1)}
    for camera, image in (images or {}).items():
        image = np.asarray(image)
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ObservationError(f"{IMAGES}{camera}: expected (H, W, 3) uint8 RGB, got {image.shape} {image.dtype}")
        obs[IMAGES + camera] = image
    for side, taxels in (tactile or {}).items():
        obs[TACTILE + side] = _finite_array(TACTILE + side, taxels, ndim=3)
    if imu is not None:
        obs[IMU] = _finite_array(IMU, imu, ndim=1, size=IMU_FIELDS)
    obs[TASK] = task
    obs[EPISODE] = dict(episode or {})
    return obs


def _finite_array(key: str, values, ndim: int, size: int | None = None) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float32)
    if arr.ndim != ndim or (size is not None and arr.shape[0] != size):
        want = f"({size},)" if size else f"{ndim}-D"
        raise ObservationError(f"{key}: expected a {want} array, got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ObservationError(f"{key}: {int(bad.sum())} NaN/inf value(s), first at index {first}; "
                               "the backend publishing this topic sent invalid data")
    return arr


def lerobot_batch(observation: Mapping[str, Any], device: str = "cpu",
                  rename: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A LeRobot batch of one: images (1, 3, H, W) float32 in [0, 1], state/tactile/IMU (1, ...)
    float32 tensors, ``task`` a list of one string; ``rename`` maps keys onto the policy's names."""
    import torch

    rename = rename or {}
    batch: dict[str, Any] = {}
    for key, value in observation.items():
        if key.startswith(IMAGES):
            tensor = torch.from_numpy(np.ascontiguousarray(value)).permute(2, 0, 1).float().div_(255.0)
        elif key.startswith("observation."):
            tensor = torch.from_numpy(np.asarray(value, dtype=np.float32))
        elif key == TASK:
            batch[rename.get(key, key)] = [value]
            continue
        else:  # episode metadata is gesim_ros's, not LeRobot's
            continue
        batch[rename.get(key, key)] = tensor.unsqueeze(0).to(device)
    return batch


# --------------------------------------------------------------------------- output checks


def check_timing(policy: Policy) -> None:
    """Fail clearly when a policy's period or horizon cannot drive a control timer."""
    period, horizon = policy.control_period_s, policy.chunk_horizon
    if not (isinstance(period, (int, float)) and math.isfinite(period) and period > 0):
        raise PolicyError(f"{type(policy).__name__}.control_period_s is {period!r}; set a positive number of seconds")
    if not (isinstance(horizon, int) and not isinstance(horizon, bool) and horizon >= 1):
        raise PolicyError(f"{type(policy).__name__}.chunk_horizon is {horizon!r}; set a positive integer")


def validate_chunk(chunk: Any, horizon: int, num_joints: int) -> np.ndarray:
    """The chunk as a (horizon, num_joints) float64 array, or a PolicyError saying what is wrong."""
    if hasattr(chunk, "detach"):  # a torch tensor, without importing torch here
        chunk = chunk.detach().cpu().numpy()
    try:
        arr = np.asarray(chunk, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"action chunk is not a numeric array ({type(chunk).__name__}: {exc}); "
                          f"return a ({horizon}, {num_joints}) array") from None
    if arr.ndim == 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.shape != (horizon, num_joints):
        raise PolicyError(f"action chunk has shape {arr.shape}; expected ({horizon}, {num_joints}) (chunk_horizon, "
                          f"action joints [L7, R7, Lgrip, Rgrip]) or (1, {horizon}, {num_joints})")
    bad = ~np.isfinite(arr)
    if bad.any():
        step, joint = (int(i) for i in np.argwhere(bad)[0])
        raise PolicyError(f"action chunk has {int(bad.sum())} NaN/inf value(s), first at step {step}, "
                          f"joint {joint}; a policy must return finite absolute targets")
    return arr


def act_checked(policy: Policy, observation: Mapping[str, Any], num_joints: int) -> np.ndarray:
    """``policy.act`` with any exception or malformed output turned into a PolicyError."""
    try:
        chunk = policy.act(observation)
    except PolicyError:
        raise
    except Exception as exc:  # a plugin's bug must end the episode, not the node
        raise PolicyError(f"{type(policy).__name__}.act raised {type(exc).__name__}: {exc}") from exc
    return validate_chunk(chunk, policy.chunk_horizon, num_joints)


# --------------------------------------------------------------------------- plugins


def available_plugins(group: str = POLICY_GROUP,
                      entry_points: Iterable[importlib.metadata.EntryPoint] | None = None
                      ) -> dict[str, importlib.metadata.EntryPoint]:
    """Plugin name -> entry point (installed ones of ``group`` by default; the first of a name wins)."""
    return available(group, entry_points)


def _load_plugin(group: str, what: str, base: type, name: str, config: Mapping[str, Any] | None,
                 entry_points: Iterable[importlib.metadata.EntryPoint] | None):
    ep, factory = load_entry_point(group, name, what, entry_points)
    plugin = factory(dict(config or {}))
    if not isinstance(plugin, base):
        raise PolicyError(f"{what} {name!r} ({ep.value}) returned {type(plugin).__name__}, not a {base.__name__}")
    if isinstance(plugin, Policy):
        check_timing(plugin)
    return plugin


def load_policy(name: str, config: Mapping[str, Any] | None = None,
                entry_points: Iterable[importlib.metadata.EntryPoint] | None = None) -> Policy:
    """The policy plugin registered as ``name``, built from ``config``."""
    return _load_plugin(POLICY_GROUP, "policy", Policy, name, config, entry_points)


def load_success_checker(name: str, config: Mapping[str, Any] | None = None,
                         entry_points: Iterable[importlib.metadata.EntryPoint] | None = None) -> SuccessChecker:
    """The success checker registered as ``name`` in ``gesim_ros.success_checkers``."""
    return _load_plugin(CHECKER_GROUP, "success checker", SuccessChecker, name, config, entry_points)


"""Plugin interface for action-conditioned world models behind the G2 ROS contract.

A backend implements :class:`WorldModel` (shaped like GE-Sim 2.0's interface so
GE-Sim and in-house models plug in the same way); a :class:`Judge` scores rollouts. Backends are
discovered by name through the ``gesim_ros.world_models`` entry-point group and judges through
``gesim_ros.judges`` (any judge with any backend), so a lab's model or judge ships as its own pip
package.

Array conventions (numpy, float32):

* frame ``(3, V, H, W)`` and frames ``(T, 3, V, H, W)`` in ``[0, 1]``, views in
  the backend's ``views`` order (GE-Sim: head, left wrist, right wrist);
* actions ``(L, D)`` and state ``(T, D)`` in the backend's joint layout (GE-Sim:
  16-D absolute joints ``[L7_arm, L_grip, R7_arm, R_grip]``).

:class:`ActionLayout` and :class:`ViewLayout` move data between the robot's
named joints / camera keys and a backend's positional layout, so nothing here
hard-codes a robot.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gesim_ros.plugins import UnknownPluginError, available, load_entry_point

ENTRY_POINT_GROUP = "gesim_ros.world_models"
JUDGE_GROUP = "gesim_ros.judges"

GESIM_VIEWS: tuple[str, ...] = ("head", "left_wrist", "right_wrist")
GESIM_CHUNK_SIZE = 25
GESIM_IMAGE_SIZE = (384, 512)  # (H, W)
GESIM_ACTION_DIM = 16
# Gripper columns of GE-Sim's [L7_arm, L_grip, R7_arm, R_grip] layout.
GESIM_GRIPPER_DIMS: tuple[int, ...] = (7, 15)
CHUNK_MODES = ("compress", "split")
# Units of a backend's gripper columns: "m" the contract's opening in metres; "mm" the opening in
# millimetres; "normalised" 0 (closed, the contract's lower limit) .. 1 (open, its upper limit).
GRIPPER_UNITS = ("m", "mm", "normalised")


class WorldModelInputError(ValueError):
    """An argument handed to a world model is malformed (shape, dtype, range, call order)."""


class WorldModelBackendError(RuntimeError):
    """A backend failed to serve a request; ``status`` is the HTTP status when remote."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        server_error: str | None = None,
        endpoint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.server_error = server_error
        self.endpoint = endpoint


class WorldModelSessionLostError(WorldModelBackendError):
    """The remote episode was lost and re-opened from its first frame; the step did not run.

    Generated history is gone, so the caller should treat the episode as restarted.
    """


class UnknownWorldModelError(UnknownPluginError):
    """No world-model plugin is registered under the requested name."""


class UnknownJudgeError(UnknownPluginError):
    """No judge plugin is registered under the requested name."""


@dataclass(frozen=True)
class StepResult:
    """Output of :meth:`WorldModel.step`.

    ``frames`` is ``(T, 3, V, H, W)`` float32 in ``[0, 1]``; ``state`` is the
    predicted robot state ``(T, D)`` float32 in the backend's layout, or ``None``
    when the backend predicts video only.
    """

    frames: np.ndarray
    state: np.ndarray | None


@dataclass(frozen=True)
class JudgeResult:
    """Per-frame task assessment: ``success_prob`` and ``progress``, both ``(T,)`` in ``[0, 1]``."""

    success_prob: np.ndarray
    progress: np.ndarray


class Configurable:
    """Built from a config dict whose keys are the constructor's keyword arguments (backends, judges)."""

    @classmethod
    def config_keys(cls) -> tuple[set[str], set[str], bool]:
        """(accepted keys, required keys, whether any key is accepted): the constructor's keyword
        arguments, for checking a config without building the plugin (which may load a model or
        connect to a server)."""
        params = inspect.signature(cls).parameters
        allowed = {n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
        required = {n for n in allowed if params[n].default is inspect.Parameter.empty}
        return allowed, required, any(p.kind is p.VAR_KEYWORD for p in params.values())

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Any:
        """Build from a config dict whose keys are the constructor's keyword arguments.

        Unknown or missing keys raise :class:`WorldModelInputError` naming them, so
        a typo in a lab's YAML/JSON fails loudly instead of silently using a default.
        """
        allowed, required, takes_any = cls.config_keys()
        unknown = sorted(set(config) - allowed)
        if unknown and not takes_any:
            raise WorldModelInputError(
                f"config: unknown key(s) {unknown} for {cls.__name__}; expected keys among {sorted(allowed)}"
            )
        missing = sorted(required - set(config))
        if missing:
            raise WorldModelInputError(f"config: missing required key(s) {missing} for {cls.__name__}")
        return cls(**config)


class WorldModel(Configurable, ABC):
    """One-episode-at-a-time action-conditioned world model (GE-Sim 2.0 shaped).

    Call order per episode: ``reset``, ``set_task``, ``set_camera_params``, ``set_episode_data``,
    ``set_episode_state`` (where the backend ``takes_episode_state``), then ``step`` repeatedly, each
    preceded by ``set_episode_traj`` where the model uses trajectory bands (``needs_trajectory_band``). Class attributes describe the contract the backend
    accepts; the server and clients validate against them.
    """

    chunk_size: int = GESIM_CHUNK_SIZE
    views: tuple[str, ...] = GESIM_VIEWS
    action_dim: int = GESIM_ACTION_DIM
    state_dim: int | None = GESIM_ACTION_DIM  # None: the backend returns no state
    image_size: tuple[int, int] | None = GESIM_IMAGE_SIZE  # (H, W); None: any size
    # For any-size backends: the size that loses nothing (a learned model's internal resolution),
    # so callers need not feed and take back larger frames that only carry interpolation.
    preferred_image_size: tuple[int, int] | None = None
    # True: the model is conditioned on trajectory bands. The caller then sends set_camera_params once
    # per episode and, before every step, set_episode_traj with the band of that step's actions
    # (GE-Sim refuses to step without one); False: neither is sent.
    needs_trajectory_band: bool = False
    # Units (GRIPPER_UNITS) of the gripper columns in the actions the backend takes and in the state
    # it returns; the caller converts from and to the contract's metres.
    gripper_command_units: str = "m"
    gripper_state_units: str = "m"
    # True: the backend takes the measured joints at the first frame (set_episode_state); False: it
    # starts from pixels only and the caller never calls set_episode_state.
    takes_episode_state: bool = False

    @abstractmethod
    def reset(self) -> None:
        """Clear all per-episode state."""

    @abstractmethod
    def set_camera_params(self, intrinsic: np.ndarray, extrinsic: np.ndarray | None = None) -> None:
        """Store per-view intrinsics ``(V, 3, 3)`` and optional first-frame camera-to-world ``(V, 4, 4)``."""

    @abstractmethod
    def set_episode_data(self, first_frame: np.ndarray) -> None:
        """Ingest the first observation ``(3, V, H, W)`` float32 in ``[0, 1]``."""

    @abstractmethod
    def set_episode_traj(self, traj: np.ndarray, c2w: np.ndarray) -> None:
        """Ingest trajectory-band conditioning ``(3, V, T, H, W)`` and per-frame c2w ``(V, T, 4, 4)``."""

    def set_task(self, task: str) -> None:
        """Store the natural-language task instruction (optional for a backend)."""

    def set_episode_state(self, state: np.ndarray) -> None:
        """Ingest the measured joints ``(D,)`` at the first frame, in the backend's layout (GE-Sim: 16-D),
        grippers in its ``gripper_state_units``. Only for backends that set ``takes_episode_state``."""
        raise WorldModelInputError(f"set_episode_state: {type(self).__name__} takes no episode state "
                                   "(takes_episode_state is False); start its episodes from the first frame only")

    @abstractmethod
    def step(self, actions: np.ndarray) -> StepResult:
        """Predict the next frames from ``(L <= chunk_size, action_dim)`` absolute joint targets."""

    def close(self) -> None:
        """Release remote sessions or devices; the default holds nothing."""

    def __enter__(self) -> WorldModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Judge(Configurable, ABC):
    """Scores generated rollouts for a task. Judges are plugins of their own (entry-point group
    ``gesim_ros.judges``, :func:`load_judge`), usable with any backend; a backend may also be one
    (``learned``), which the judge named ``backend`` selects.

    Implement it only where the verdict carries information: an episode without a judge gets the
    outcome *unknown*, which the comparison counts as unjudged, never as an agreement or a
    disagreement. A constant probability would be turned into a success or failure by the node's
    threshold.
    """

    # The views the judge reads, in order (frames handed to judge() hold exactly these); None: all
    # the backend's views in its order (a backend's own judge). GE-Sim's reward interface carries
    # only ("head",).
    judge_views: tuple[str, ...] | None = None

    @abstractmethod
    def judge(self, frames: np.ndarray, state: np.ndarray | None, task: str) -> JudgeResult:
        """Return per-frame success probability and progress for ``frames (T, 3, V, H, W)`` float32 in
        [0, 1] (V: ``judge_views``) and the predicted ``state (T, D)`` in the backend's layout with grippers
        in metres, or None for a video-only backend."""

    def close(self) -> None:
        """Release connections or devices; the default holds nothing."""


# --------------------------------------------------------------------------- validation


def _format_spec(spec: Sequence[int | str | tuple[str, int]]) -> str:
    parts = [str(s) if isinstance(s, (int, str)) else f"{s[0]}={s[1]}" for s in spec]
    return "(" + ", ".join(parts) + ")"


def check_array(
    arg: str,
    value: Any,
    spec: Sequence[int | str | tuple[str, int]],
    *,
    unit_range: bool = False,
) -> np.ndarray:
    """Return ``value`` as a C-contiguous float32 array after checking it.

    ``spec`` lists the expected dims: an int is a fixed size, a str a free
    (non-empty) dim, ``(name, size)`` a named fixed size. Errors name ``arg``,
    what is wrong and the expected shape, because these messages end up in a
    remote client's log far from the code that produced the array.
    """
    expected = _format_spec(spec)
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise WorldModelInputError(f"{arg}: not a numeric array ({exc}); expected shape {expected}") from None
    fixed = [s if isinstance(s, int) else (None if isinstance(s, str) else s[1]) for s in spec]
    if arr.ndim != len(spec) or any(
        dim == 0 or (size is not None and dim != size) for dim, size in zip(arr.shape, fixed)
    ):
        raise WorldModelInputError(f"{arg}: wrong shape {tuple(arr.shape)}; expected {expected}")
    finite = np.isfinite(arr)
    if not finite.all():
        first = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise WorldModelInputError(
            f"{arg}: {int((~finite).sum())} NaN/inf value(s), first at index {first}; "
            f"expected finite values, shape {expected}"
        )
    if unit_range and (arr.min() < 0.0 or arr.max() > 1.0):
        raise WorldModelInputError(
            f"{arg}: values outside [0, 1] (min {float(arr.min()):.4g}, max {float(arr.max()):.4g}); "
            f"expected float32 in [0, 1], shape {expected}"
        )
    return np.ascontiguousarray(arr)


def _image_dims(model: WorldModel) -> list[str | tuple[str, int]]:
    if model.image_size is None:
        return ["H", "W"]
    return [("H", model.image_size[0]), ("W", model.image_size[1])]


def check_gripper_units(name: str, value: Any) -> str:
    """``value`` if it is one of GRIPPER_UNITS, else WorldModelInputError naming ``name``."""
    if value not in GRIPPER_UNITS:
        raise WorldModelInputError(f"{name}: {value!r} is not one of {list(GRIPPER_UNITS)} (GE-Sim-V2 takes "
                                   "'normalised' gripper commands and reports its gripper state in 'mm')")
    return value


def validate_actions(actions: Any, model: WorldModel) -> np.ndarray:
    """Check an ``(L <= chunk_size, action_dim)`` action chunk for ``model``."""
    arr = check_array("actions", actions, ["L", ("D", model.action_dim)])
    if arr.shape[0] > model.chunk_size:
        raise WorldModelInputError(
            f"actions: {arr.shape[0]} steps exceed chunk_size {model.chunk_size}; "
            f"expected (L<={model.chunk_size}, D={model.action_dim}) "
            "(use compress_chunk/split_chunk or step_chunked)"
        )
    return arr


def validate_first_frame(first_frame: Any, model: WorldModel) -> np.ndarray:
    """Check a ``(3, V, H, W)`` frame in ``[0, 1]`` for ``model``."""
    spec = [3, ("V", len(model.views)), *_image_dims(model)]
    return check_array("first_frame", first_frame, spec, unit_range=True)


def validate_frames(arg: str, frames: Any, model: WorldModel) -> np.ndarray:
    """Check ``(T, 3, V, H, W)`` frames in ``[0, 1]`` for ``model``."""
    spec = ["T", 3, ("V", len(model.views)), *_image_dims(model)]
    return check_array(arg, frames, spec, unit_range=True)


def validate_episode_traj(traj: Any, c2w: Any, model: WorldModel) -> tuple[np.ndarray, np.ndarray]:
    """Check trajectory bands ``(3, V, T, H, W)`` and matching c2w ``(V, T, 4, 4)``."""
    num_views = len(model.views)
    traj_arr = check_array("traj", traj, [3, ("V", num_views), "T", *_image_dims(model)], unit_range=True)
    steps = traj_arr.shape[2]
    c2w_arr = check_array("c2w", c2w, [("V", num_views), ("T", steps), 4, 4])
    return traj_arr, c2w_arr


def validate_camera_params(
    intrinsic: Any, extrinsic: Any | None, model: WorldModel
) -> tuple[np.ndarray, np.ndarray | None]:
    """Check intrinsics ``(V, 3, 3)`` and optional extrinsics ``(V, 4, 4)``."""
    num_views = ("V", len(model.views))
    k = check_array("intrinsic", intrinsic, [num_views, 3, 3])
    e = None if extrinsic is None else check_array("extrinsic", extrinsic, [num_views, 4, 4])
    return k, e


def validate_step_result(result: Any, model: WorldModel) -> StepResult:
    """Check a backend's :class:`StepResult` (frames, and state rows matching frames)."""
    if not isinstance(result, StepResult):
        raise WorldModelInputError(f"step result: expected StepResult, got {type(result).__name__}")
    frames = validate_frames("frames", result.frames, model)
    if result.state is None:
        return StepResult(frames, None)
    state_spec = [("T", frames.shape[0]), "D" if model.state_dim is None else ("D", model.state_dim)]
    return StepResult(frames, check_array("state", result.state, state_spec))


# --------------------------------------------------------------------------- plugin discovery


def available_world_models(
    entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
) -> dict[str, importlib.metadata.EntryPoint]:
    """Map plugin names to entry points (installed ``gesim_ros.world_models`` ones by default)."""
    return available(ENTRY_POINT_GROUP, entry_points)


def load_world_model(
    name: str,
    config: Mapping[str, Any] | None = None,
    entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
) -> WorldModel:
    """Instantiate the world-model plugin registered as ``name`` via ``from_config(config)``."""
    ep, cls = load_entry_point(ENTRY_POINT_GROUP, name, "world model", entry_points, UnknownWorldModelError)
    if not (isinstance(cls, type) and issubclass(cls, WorldModel)):
        raise TypeError(f"world model {name!r} ({ep.value}) is {cls!r}, not a WorldModel subclass")
    return cls.from_config(dict(config or {}))


EntryPoints = Iterable[importlib.metadata.EntryPoint]


def available_judges(entry_points: EntryPoints | None = None) -> dict[str, importlib.metadata.EntryPoint]:
    """Map judge names to entry points (installed ``gesim_ros.judges`` ones by default)."""
    return available(JUDGE_GROUP, entry_points)


def load_judge(name: str, config: Mapping[str, Any] | None = None, *, backend: WorldModel | None = None,
               entry_points: EntryPoints | None = None) -> Judge | None:
    """The judge registered as ``name``, or None for no judge (outcome unknown).

    An entry point names either a :class:`Judge` subclass, built with ``from_config(config)``, or a
    factory ``f(config, backend) -> Judge | None`` for judges that depend on the episode's backend
    (``backend``: the backend's own judge; ``none``)."""
    ep, target = load_entry_point(JUDGE_GROUP, name, "judge", entry_points, UnknownJudgeError)
    config = dict(config or {})
    if isinstance(target, type):
        if not issubclass(target, Judge):
            raise TypeError(f"judge {name!r} ({ep.value}) is {target!r}, not a Judge subclass")
        return target.from_config(config)
    if not callable(target):
        raise TypeError(f"judge {name!r} ({ep.value}) is {target!r}: expected a Judge subclass or a factory "
                        "f(config, backend)")
    judge = target(config, backend)
    if judge is not None and not isinstance(judge, Judge):
        raise TypeError(f"judge {name!r} ({ep.value}) returned {type(judge).__name__}, not a Judge or None")
    return judge

"""Plugin interface for action-conditioned world models behind the G2 ROS contract.

A backend implements :class:`WorldModel` (shaped like GE-Sim 2.0's interface so
GE-Sim and in-house models plug in the same way) and optionally :class:`Judge`.
Backends are discovered by name through the ``gesim_ros.world_models``
entry-point group, so a lab's model ships as its own pip package.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gesim_ros.plugins import UnknownPluginError, available, load_entry_point

ENTRY_POINT_GROUP = "gesim_ros.world_models"

GESIM_VIEWS: tuple[str, ...] = ("head", "left_wrist", "right_wrist")
GESIM_CHUNK_SIZE = 25
GESIM_IMAGE_SIZE = (384, 512)  # (H, W)
GESIM_ACTION_DIM = 16
# Gripper columns of GE-Sim's [L7_arm, L_grip, R7_arm, R_grip] layout.
GESIM_GRIPPER_DIMS: tuple[int, ...] = (7, 15)
CHUNK_MODES = ("compress", "split")


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


class WorldModel(ABC):
    """One-episode-at-a-time action-conditioned world model (GE-Sim 2.0 shaped).

    Call order per episode: ``reset``, ``set_camera_params``, ``set_episode_data``,
    ``set_episode_traj`` (if the model uses trajectory bands), ``set_task``, then
    ``step`` repeatedly. Class attributes describe the contract the backend
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

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> WorldModel:
        """Build from a config dict whose keys are the constructor's keyword arguments.

        Unknown or missing keys raise :class:`WorldModelInputError` naming them, so
        a typo in a lab's YAML/JSON fails loudly instead of silently using a default.
        """
        params = inspect.signature(cls).parameters
        allowed = {n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        unknown = sorted(set(config) - allowed)
        if unknown and not takes_any:
            raise WorldModelInputError(
                f"config: unknown key(s) {unknown} for {cls.__name__}; expected keys among {sorted(allowed)}"
            )
        missing = sorted(n for n in allowed if params[n].default is inspect.Parameter.empty and n not in config)
        if missing:
            raise WorldModelInputError(f"config: missing required key(s) {missing} for {cls.__name__}")
        return cls(**config)

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

    @abstractmethod
    def step(self, actions: np.ndarray) -> StepResult:
        """Predict the next frames from ``(L <= chunk_size, action_dim)`` absolute joint targets."""

    def close(self) -> None:
        """Release remote sessions or devices; the default holds nothing."""

    def __enter__(self) -> WorldModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Judge(ABC):
    """Scores generated rollouts for a task; a backend may implement it next to :class:`WorldModel`.

    Implement it only where the verdict carries information: a backend that is no Judge (the
    ``kinematic`` baseline, ``gesim_http``) gets the outcome *unknown* for its episodes, which the
    comparison counts as unjudged, never as an agreement or a disagreement. A constant
    probability would be turned into a success or failure by the node's threshold.
    """

    @abstractmethod
    def judge(self, frames: np.ndarray, state: np.ndarray | None, task: str) -> JudgeResult:
        """Return per-frame success probability and progress for ``frames (T, 3, V, H, W)``."""


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


# --------------------------------------------------------------------------- layouts


class ActionLayout:
    """Names every dimension of a joint vector so vectors move between layouts by name.

    ``names[i]`` is the joint driving column ``i``; ``gripper_names`` marks the
    discrete-ish gripper columns that :func:`compress_chunk` must not average.
    """

    def __init__(self, names: Sequence[str], gripper_names: Iterable[str] = ()) -> None:
        self.names = tuple(names)
        if not self.names or not all(isinstance(n, str) and n for n in self.names):
            raise WorldModelInputError(f"names: expected a non-empty sequence of joint names, got {names!r}")
        dupes = sorted({n for n in self.names if self.names.count(n) > 1})
        if dupes:
            raise WorldModelInputError(f"names: duplicate joint name(s) {dupes}")
        grippers = set(gripper_names)
        unknown = sorted(grippers - set(self.names))
        if unknown:
            raise WorldModelInputError(f"gripper_names: {unknown} are not among names {list(self.names)}")
        self.gripper_dims = tuple(i for i, n in enumerate(self.names) if n in grippers)

    @classmethod
    def gesim(
        cls, left_arm: Sequence[str], left_gripper: str, right_arm: Sequence[str], right_gripper: str
    ) -> ActionLayout:
        """GE-Sim's world-model layout ``[L_arm, L_grip, R_arm, R_grip]``."""
        return cls([*left_arm, left_gripper, *right_arm, right_gripper], [left_gripper, right_gripper])

    @classmethod
    def policy(
        cls, left_arm: Sequence[str], left_gripper: str, right_arm: Sequence[str], right_gripper: str
    ) -> ActionLayout:
        """The policy-side layout ``[L_arm, R_arm, L_grip, R_grip]``."""
        return cls([*left_arm, *right_arm, left_gripper, right_gripper], [left_gripper, right_gripper])

    def gather(self, source_names: Sequence[str], values: Any) -> np.ndarray:
        """Pick this layout's joints out of ``values (..., len(source_names))``.

        ``source_names`` may hold extra joints in any order (a ROS ``JointState``
        with head and waist joints, say); missing ones raise, listing them.
        """
        source = list(source_names)
        missing = [n for n in self.names if n not in source]
        if missing:
            raise WorldModelInputError(f"source_names: missing joint(s) {missing}; expected all of {list(self.names)}")
        arr = np.asarray(values, dtype=np.float32)
        if arr.ndim == 0 or arr.shape[-1] != len(source):
            raise WorldModelInputError(
                f"values: wrong shape {tuple(arr.shape)}; expected (..., {len(source)}) matching source_names"
            )
        return arr[..., [source.index(n) for n in self.names]]

    def convert(self, values: Any, target: ActionLayout) -> np.ndarray:
        """Re-order ``values (..., len(names))`` from this layout into ``target``'s."""
        return target.gather(self.names, values)


class ViewLayout:
    """Maps the contract's camera keys onto a backend's view order.

    ``camera_for_view`` maps each backend view name (e.g. ``"left_wrist"``) to the
    camera key the ROS contract uses for it.
    """

    def __init__(self, camera_for_view: Mapping[str, str], views: Sequence[str] = GESIM_VIEWS) -> None:
        self.views = tuple(views)
        if set(camera_for_view) != set(self.views):
            raise WorldModelInputError(
                f"camera_for_view: keys {sorted(camera_for_view)} must be exactly the backend views {list(self.views)}"
            )
        self.camera_keys = tuple(camera_for_view[v] for v in self.views)

    def stack(self, images: Mapping[str, np.ndarray]) -> np.ndarray:
        """Build a ``(3, V, H, W)`` float32 frame from per-camera RGB ``(H, W, 3)`` images.

        uint8 images are scaled by 1/255; float images must already be in ``[0, 1]``.
        """
        missing = [k for k in self.camera_keys if k not in images]
        if missing:
            raise WorldModelInputError(f"images: missing camera(s) {missing}; expected {list(self.camera_keys)}")
        views = []
        for key in self.camera_keys:
            image = np.asarray(images[key])
            scaled = image.astype(np.float32) / 255.0 if image.dtype == np.uint8 else image
            views.append(check_array(f"images[{key!r}]", scaled, ["H", "W", 3], unit_range=True))
        sizes = {v.shape[:2] for v in views}
        if len(sizes) != 1:
            raise WorldModelInputError(f"images: cameras differ in size {sorted(sizes)}; expected one (H, W)")
        return np.ascontiguousarray(np.stack(views, axis=0).transpose(3, 0, 1, 2))

    def unstack(self, frames: np.ndarray) -> dict[str, np.ndarray]:
        """Split ``(..., 3, V, H, W)`` frames into per-camera uint8 RGB ``(..., H, W, 3)`` images."""
        arr = np.asarray(frames)
        if arr.ndim < 4 or arr.shape[-4] != 3 or arr.shape[-3] != len(self.views):
            raise WorldModelInputError(
                f"frames: wrong shape {tuple(arr.shape)}; expected (..., 3, V={len(self.views)}, H, W)"
            )
        rgb = (np.clip(arr, 0.0, 1.0) * 255.0).round().astype(np.uint8)
        return {key: np.moveaxis(rgb[..., :, i, :, :], -3, -1) for i, key in enumerate(self.camera_keys)}


# --------------------------------------------------------------------------- chunk adaptation


def compress_chunk(
    actions: Any, target: int = GESIM_CHUNK_SIZE, gripper_dims: Sequence[int] = GESIM_GRIPPER_DIMS
) -> np.ndarray:
    """Down-sample ``(L, D)`` actions to ``(target, D)`` the way GE-Sim's server does.

    Arm (continuous) dims keep their first and last rows exactly and
    adaptive-average-pool the ``L - 2`` interior rows into ``target - 2`` bins
    (bin ``i`` spans ``[floor(i*n/m), ceil((i+1)*n/m))``). Gripper dims take the
    nearest original row at ``round(linspace(0, L-1, target))`` (numpy's
    half-to-even rounding) so open/close events keep their values and timing.
    ``target == 1`` keeps the first row. ``L < target`` raises: padding would
    fabricate commands.
    """
    arr = check_array("actions", actions, ["L", "D"])
    length, dim = arr.shape
    if target < 1 or length < target:
        raise WorldModelInputError(
            f"actions: cannot compress {length} steps to target={target}; expected L >= target >= 1"
        )
    if any(not -dim <= d < dim for d in gripper_dims):
        raise WorldModelInputError(f"gripper_dims: {list(gripper_dims)} out of range for D={dim}")
    if length == target:
        return arr.copy()
    if target == 1:
        return arr[:1].copy()
    grip = sorted({d % dim for d in gripper_dims})
    arm = [i for i in range(dim) if i not in grip]
    out = np.empty((target, dim), dtype=np.float32)
    nearest = np.round(np.linspace(0, length - 1, target)).astype(int)
    out[:, grip] = arr[nearest][:, grip]
    out[0, arm] = arr[0, arm]
    out[-1, arm] = arr[-1, arm]
    interior, bins = arr[1:-1, arm].astype(np.float64), target - 2
    for i in range(bins):
        start = (i * len(interior)) // bins
        stop = -((-(i + 1) * len(interior)) // bins)
        out[1 + i, arm] = interior[start:stop].mean(axis=0)
    return out


def split_chunk(actions: Any, size: int = GESIM_CHUNK_SIZE) -> list[np.ndarray]:
    """Split ``(L, D)`` actions into consecutive ``size``-step sub-chunks (the last may be shorter)."""
    arr = check_array("actions", actions, ["L", "D"])
    if size < 1:
        raise WorldModelInputError(f"size: must be >= 1, got {size}")
    return [arr[i : i + size].copy() for i in range(0, len(arr), size)]


def step_chunked(
    step: Callable[[np.ndarray], StepResult],
    actions: Any,
    chunk_size: int = GESIM_CHUNK_SIZE,
    mode: str = "compress",
    gripper_dims: Sequence[int] = GESIM_GRIPPER_DIMS,
) -> StepResult:
    """Run a policy chunk of any length through ``step`` (which takes ``<= chunk_size`` rows).

    ``compress`` sends one :func:`compress_chunk` chunk (one model call, ``chunk_size``
    frames); ``split`` sends :func:`split_chunk` pieces in order and concatenates
    the results (state is ``None`` unless every piece returned state).
    """
    if mode not in CHUNK_MODES:
        raise WorldModelInputError(f"mode: {mode!r} is not one of {list(CHUNK_MODES)}")
    arr = check_array("actions", actions, ["L", "D"])
    if len(arr) <= chunk_size:
        return step(arr)
    if mode == "compress":
        return step(compress_chunk(arr, chunk_size, gripper_dims))
    results = [step(piece) for piece in split_chunk(arr, chunk_size)]
    frames = np.concatenate([r.frames for r in results], axis=0)
    states = [r.state for r in results]
    state = None if any(s is None for s in states) else np.concatenate(states, axis=0)
    return StepResult(frames, state)


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

"""Joint and view layouts, and chunk adaptation: vectors move between GE-Sim's layout and the
contract's by name, and action chunks of any length are fitted to a backend's chunk size
(compressed or split)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from gesim_ros.world_model.api import (
    CHUNK_MODES,
    GESIM_CHUNK_SIZE,
    GESIM_GRIPPER_DIMS,
    GESIM_VIEWS,
    StepResult,
    WorldModelInputError,
    check_array,
)


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

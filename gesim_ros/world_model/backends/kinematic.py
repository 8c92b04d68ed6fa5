"""``kinematic``: a BASELINE world model with no learning and no physics.

It exists so the whole ROS pipeline (contract, server, client, judge) runs and
can be tested before a learned model is available, and as a floor that a
learned model must beat. What it predicts:

* state: each joint follows its commanded absolute target with a first-order
  lag, ``q += (1 - exp(-dt / tau)) * (target - q)`` per action step, starting
  from the first commanded target of the episode (the interface carries no
  measured start state);
* frames: the episode's first frame, with each wrist view shifted in pixels in
  proportion to how far that arm's first two joints moved since the episode
  started. The head view never changes: the 16-D action has no head or waist
  joints. Objects never move, grippers never grasp;
* no judge: nothing here can tell a success from a failure, so it is no
  :class:`~gesim_ros.world_model.api.Judge`, and the world-model node reports its
  episodes' outcome as unknown (unjudged in the comparison), not a made-up probability.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from gesim_ros.world_model.api import (
    GESIM_CHUNK_SIZE,
    GESIM_VIEWS,
    StepResult,
    WorldModel,
    WorldModelInputError,
    validate_actions,
    validate_camera_params,
    validate_episode_traj,
    validate_first_frame,
)

# View index -> (joint for horizontal shift, joint for vertical shift) in GE-Sim's
# [L7_arm, L_grip, R7_arm, R_grip] layout: each wrist camera follows its arm's
# shoulder joints 1 and 2.
_WRIST_VIEW_JOINTS = {1: (0, 1), 2: (8, 9)}


class KinematicWorldModel(WorldModel):
    """Baseline: first-order-lag joint tracking and shifted first-frame views (see module doc)."""

    views = GESIM_VIEWS
    image_size = None  # any size: frames are derived from the first frame

    def __init__(
        self,
        *,
        time_constant_s: float = 0.15,
        control_dt_s: float = 1.0 / 30.0,
        pixels_per_rad: float = 40.0,
        chunk_size: int = GESIM_CHUNK_SIZE,
    ) -> None:
        if not (time_constant_s >= 0 and control_dt_s > 0):
            raise WorldModelInputError(
                f"time_constant_s/control_dt_s: expected >= 0 and > 0, got {time_constant_s!r}, {control_dt_s!r}"
            )
        if int(chunk_size) < 1:
            raise WorldModelInputError(f"chunk_size: expected >= 1, got {chunk_size!r}")
        # Fraction of the remaining error closed per action step; tau = 0 tracks exactly.
        self.gain = 1.0 if time_constant_s == 0 else 1.0 - math.exp(-control_dt_s / time_constant_s)
        self.pixels_per_rad = float(pixels_per_rad)
        self.chunk_size = int(chunk_size)
        self.reset()

    def reset(self) -> None:
        self.task = ""
        self._first_frame: np.ndarray | None = None
        self._start_state: np.ndarray | None = None
        self._state: np.ndarray | None = None

    def set_camera_params(self, intrinsic: np.ndarray, extrinsic: np.ndarray | None = None) -> None:
        validate_camera_params(intrinsic, extrinsic, self)  # checked for contract parity, unused

    def set_episode_data(self, first_frame: np.ndarray) -> None:
        self._first_frame = validate_first_frame(first_frame, self)
        self._start_state = self._state = None

    def set_episode_traj(self, traj: np.ndarray, c2w: np.ndarray) -> None:
        validate_episode_traj(traj, c2w, self)  # checked for contract parity; the baseline has no band conditioning

    def set_task(self, task: str) -> None:
        self.task = task

    def step(self, actions: np.ndarray) -> StepResult:
        actions = validate_actions(actions, self)
        if self._first_frame is None:
            raise WorldModelInputError("step: no episode data; call set_episode_data(first_frame) first")
        if self._state is None:
            self._start_state = actions[0].copy()
            self._state = actions[0].copy()
        states = np.empty_like(actions)
        for t, target in enumerate(actions):
            self._state = self._state + np.float32(self.gain) * (target - self._state)
            states[t] = self._state
        frames = np.stack([self._render(s) for s in states])
        return StepResult(frames, states)

    def _render(self, state: np.ndarray) -> np.ndarray:
        frame = self._first_frame.copy()
        for view, (jx, jy) in _WRIST_VIEW_JOINTS.items():
            dx, dy = self.pixels_per_rad * (state[[jx, jy]] - self._start_state[[jx, jy]])
            if dx == 0 and dy == 0:
                continue
            image = np.ascontiguousarray(frame[:, view].transpose(1, 2, 0))  # (H, W, 3)
            shift = np.float32([[1, 0, dx], [0, 1, dy]])
            moved = cv2.warpAffine(
                image, shift, image.shape[1::-1], flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
            )
            frame[:, view] = moved.transpose(2, 0, 1)
        return frame

"""One recorded episode as arrays: what world-model training, evaluation and the comparator read.

An ``EpisodeRecord`` is sampled at the policy's control rate: step k holds the camera frames and the
measured action-joint positions *before* action k is applied, so frames and positions have one more
step than actions. It is built from a recorded MCAP episode (see ``episode_recording``) or directly
from the twin, and round-trips through a compressed ``.npz`` for caching.

Twin records also carry ``scene_state``: the task object's pose and size, whether it is held,
whether the robot has hit the table so far and the contact forces that decide it, and the task's
goal, at the same steps as the frames (columns ``SCENE_STATE_NAMES``), so a model can be supervised
on what happens in the scene, not only on the outcome label.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

VIEWS = ("head", "left_wrist", "right_wrist")
# World frame (m, unit quaternion w x y z); held / table_contact are 0.0 or 1.0; the goal and the object's
# half extents (m, along its own axes) are constant; the forces (N) are the largest robot-on-table/bin/housing
# and robot-pressing-object (not a finger pad) normal forces since the previous step: what the twin's
# collision verdict (table_contact) compares with its limits.
SCENE_STATE_NAMES = ("object_x", "object_y", "object_z", "object_qw", "object_qx", "object_qy", "object_qz", "held",
                     "table_contact", "goal_x", "goal_y", "goal_z", "object_half_x", "object_half_y", "object_half_z",
                     "static_force", "press_force")


@dataclass
class EpisodeRecord:
    episode_id: str
    task: str
    task_text: str
    seed: int
    success: bool
    label: str                      # ground-truth outcome label, e.g. success, missed_grasp
    control_period_s: float
    joint_names: list[str]          # the action joints, contract order [L7, R7, Lgrip, Rgrip]
    actions: np.ndarray             # (T, J) float32 absolute targets
    joint_positions: np.ndarray     # (T + 1, J) float32 measured
    frames: dict[str, np.ndarray]   # view -> (T + 1, H, W, 3) uint8 RGB
    failure_mode: str | None = None  # what the scripted controller injected, if anything
    extra: dict = field(default_factory=dict)
    scene_state: np.ndarray | None = None   # (T + 1, len(SCENE_STATE_NAMES)) float32; None in older records

    def __post_init__(self):
        steps = len(self.actions)
        if self.actions.ndim != 2 or self.actions.shape[1] != len(self.joint_names):
            raise ValueError(f"episode {self.episode_id}: actions must be (T, {len(self.joint_names)}), "
                             f"got {self.actions.shape}")
        if self.joint_positions.shape != (steps + 1, len(self.joint_names)):
            raise ValueError(f"episode {self.episode_id}: joint_positions must be ({steps + 1}, "
                             f"{len(self.joint_names)}), got {self.joint_positions.shape}")
        for view, frames in self.frames.items():
            if frames.ndim != 4 or frames.shape[0] != steps + 1 or frames.shape[3] != 3 or frames.dtype != np.uint8:
                raise ValueError(f"episode {self.episode_id}: frames['{view}'] must be ({steps + 1}, H, W, 3) "
                                 f"uint8, got {frames.shape} {frames.dtype}")
        if self.scene_state is not None and self.scene_state.shape != (steps + 1, len(SCENE_STATE_NAMES)):
            older = (" (a record made before the object size and contact forces were recorded: record it again "
                     "with 'gesim-ros record-training')" if self.scene_state.shape[1:] == (12,) else "")
            raise ValueError(f"episode {self.episode_id}: scene_state must be ({steps + 1}, {len(SCENE_STATE_NAMES)}) "
                             f"(columns SCENE_STATE_NAMES), got {self.scene_state.shape}{older}")

    @property
    def steps(self) -> int:
        return len(self.actions)

    def save_npz(self, path: Path) -> None:
        arrays_of = ("actions", "joint_positions", "frames", "scene_state")
        meta = {k: v for k, v in asdict(self).items() if k not in arrays_of}
        arrays = {"actions": self.actions, "joint_positions": self.joint_positions,
                  **{f"frames_{v}": f for v, f in self.frames.items()}}
        if self.scene_state is not None:
            arrays["scene_state"] = self.scene_state
        tmp = Path(path).with_suffix(".tmp.npz")
        np.savez_compressed(tmp, meta=np.array(json.dumps(meta)), **arrays)
        tmp.replace(path)  # never leave a half-written cache file

    @classmethod
    def load_npz(cls, path: Path) -> "EpisodeRecord":
        with np.load(path) as data:
            meta = json.loads(str(data["meta"]))
            frames = {k[len("frames_"):]: data[k] for k in data.files if k.startswith("frames_")}
            scene_state = data["scene_state"] if "scene_state" in data.files else None   # older records: none
            return cls(actions=data["actions"], joint_positions=data["joint_positions"], frames=frames,
                       scene_state=scene_state, **meta)

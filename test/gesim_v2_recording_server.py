"""GE-Sim-V2's own server with their example model, recording what it was given (a test-side wrapper).

Run with their code importable (gesim_ros.tools.gesim_v2_peer does it):
    python test/gesim_v2_recording_server.py --record FILE.jsonl --model example --host H --port P
Everything after --record is THEIR launcher's command line (gesim.server.__main__.main, unchanged).
The only hook: their model registry's "example" entry points at a subclass of THEIR ExampleWorldModel
that appends one JSON line per model call to FILE before their code handles it: the shapes of
set_camera_params' and set_episode_traj's arrays (and the band's value range), set_episode_data's
frame shape, and per step the action count with the gripper columns (7, 15: their [L7, Lgrip, R7,
Rgrip]) of the actions and of the state their model returns.
"""

from __future__ import annotations

import json
import os
import sys
import threading

import numpy as np
from gesim.models import base
from gesim.models.example import ExampleWorldModel
from gesim.server import __main__ as their_launcher

GRIPPERS = [7, 15]
_lock = threading.Lock()
_record_path: str | None = None


def record(kind: str, **fields) -> None:
    with _lock, open(_record_path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"kind": kind, **fields}) + "\n")


def _shape(array) -> list[int] | None:
    return None if array is None else list(np.asarray(array).shape)


class RecordingExampleModel(ExampleWorldModel):
    """Their example model, unchanged in behaviour; each call recorded first."""

    def reset(self) -> None:
        record("reset")
        super().reset()

    def set_task(self, task: str) -> None:
        record("set_task", task=task)
        super().set_task(task)

    def set_camera_params(self, intrinsic, extrinsic=None) -> None:
        record("set_camera_params", intrinsic=_shape(intrinsic), extrinsic=_shape(extrinsic))
        super().set_camera_params(intrinsic, extrinsic)

    def set_episode_data(self, first_frame) -> None:
        record("set_episode_data", first_frame=_shape(first_frame))
        super().set_episode_data(first_frame)

    def set_episode_traj(self, traj, c2w) -> None:
        traj = np.asarray(traj)
        record("set_episode_traj", traj=_shape(traj), c2w=_shape(c2w),
               traj_range=[float(traj.min()), float(traj.max())])
        super().set_episode_traj(traj, c2w)

    def step(self, actions):
        actions = np.asarray(actions, dtype=np.float32)
        entry = {"actions": _shape(actions), "action_grippers": actions[:, GRIPPERS].tolist()}
        try:
            result = super().step(actions)
        except Exception as exc:
            record("step", **entry, error=f"{type(exc).__name__}: {exc}")
            raise
        state = None if result.state is None else np.asarray(result.state)[:, GRIPPERS].tolist()
        record("step", **entry, frames=_shape(result.frames), state_grippers=state)
        return result


def main() -> None:
    global _record_path
    args = sys.argv[1:]
    if len(args) < 2 or args[0] != "--record":
        sys.exit("usage: gesim_v2_recording_server.py --record FILE.jsonl [their gesim.server options]")
    _record_path = os.path.abspath(args[1])
    open(_record_path, "a").close()
    base._REGISTRY["example"] = f"{__name__}:RecordingExampleModel"  # their registry: import path -> class
    sys.argv = ["gesim.server", *args[2:]]
    their_launcher.main()


if __name__ == "__main__":
    main()

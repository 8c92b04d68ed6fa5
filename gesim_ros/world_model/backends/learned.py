"""``learned``: the embedded default world model, a small action-conditioned, object-centric model.

GE-Sim 2.0 shaped (first observation + action chunks in, multi-view frames, joint state and a judge
out) but sized to run faster than real time on a 2-core CPU. Its imagined state is not a video latent:
issue #17 measured that one loses what decides an episode (a few millimetres at the fingertips), so
the state is the robot's joints and the task object's pose, held and collision flags, read from the
first frame and stepped with the actions:

* scene reader (``learned_reader``): the first frame at 80x128 per view, each pixel with the point
  where its ray meets the objects' resting plane (the cameras' calibration from the contract and the
  G2's kinematics at the measured joints); heatmaps whose expected plane points, with the joints and
  the task, give the object's position, half extents and the goal; then each view resampled into a
  top-down patch of the plane through the object's top face, around where it was found, from which
  a small conv net reads the object's yaw (modulo a quarter turn);
* dynamics (``learned_dynamics``): every control step, both hands' keypoints by the G2's forward
  kinematics (``learned_kinematics``) of the joints and of the targets, seen from the object (with
  their clearance above the work surface and the grip's squeeze in millimetres), give the object's
  motion (a held object also takes its hand's step), held, the contact forces and the sticky
  collision flag; the joints follow a
  servo prior fitted to the data plus a learned correction. This is the state expert: it decodes
  the robot's proprioception and the task object's state at every step;
* frame renderer: a decoder paints the three views (48x64 internally) from the imagined joints and
  object through the first frame's feature maps, blended with the first frame by a predicted mask;
  keyframes every 3 control steps and at the end of each chunk, blended linearly between;
* judge: an MLP on the imagined scene (the object relative to the goal and to the hands' grasp
  points, its height and orientation, held, collision), the time since the episode's start and the
  task, giving success probability and progress; never on the actions. Trained on the model's own
  open-loop imagined scenes (started from its reading of the first frame, as the node starts them)
  and on the recorded ones.

Joint order inside the network and in checkpoints is the policy's ``[L7 arm, R7 arm, L grip, R
grip]`` (as in :class:`~gesim_ros.episodes.data.EpisodeRecord`); the :class:`LearnedWorldModel`
backend speaks GE-Sim's ``[L7 arm, L grip, R7 arm, R grip]`` like every other backend.
"""

from __future__ import annotations

import numpy as np
import torch

from gesim_ros.contract.contract import DEFAULT_PROFILE, load_contract
from gesim_ros.episodes.data import SCENE_STATE_NAMES
from gesim_ros.world_model.api import GESIM_VIEWS, Judge, JudgeResult, StepResult, WorldModel, WorldModelInputError, check_array, validate_actions, validate_camera_params, validate_episode_traj, validate_first_frame
from gesim_ros.world_model.layouts import ActionLayout
from gesim_ros.world_model.backends.learned_checkpoint import (
    DEFAULT_CHECKPOINT,
    load_checkpoint,
)
from gesim_ros.world_model.backends.learned_network import Imagination, resize_images
from gesim_ros.world_model.backends.learned_reader import camera_geometry

BACKEND_NAME = "learned"


class LearnedWorldModel(WorldModel, Judge):
    """The ``learned`` backend: a trained :class:`WorldModelNet` behind the GE-Sim-shaped interface.

    Actions and state use GE-Sim's ``[L7 arm, L grip, R7 arm, R grip]`` layout (``self.layout``
    names the joints). Frames come back at the size of the first frame. The imagined state is kept
    between ``step`` calls of an episode; ``judgement()`` gives the judge's per-step success
    probability and progress for the whole episode so far, ``scene_state()`` the imagined scene.

    The cameras' geometry comes from the contract's calibration and the G2's kinematics at the
    measured joints (the same source the node's other backends get from ``set_camera_params``), so
    the model reads the first frame the way it was trained whoever calls it.
    """

    views = GESIM_VIEWS
    image_size = None  # any size: resized to the model's resolution and back
    takes_episode_state = True

    def __init__(self, *, checkpoint: str | None = None, contract: str = DEFAULT_PROFILE,
                 chunk_size: int = 30, num_threads: int | None = 1) -> None:
        """``checkpoint``: path, default the one shipped in ``gesim_ros/models``; ``contract``:
        the profile whose arm and gripper joints the checkpoint must have been trained on and whose
        camera calibration it reads the first frame with; ``num_threads``: torch's CPU threads for
        the whole process (None: leave torch's setting). One thread predicts 1 s of control for 3
        views in well under 0.1 s of CPU, and on a busy 2-core machine is much faster than two,
        where the second mostly spins waiting."""
        from gesim_ros.twin.kinematics import G2Kinematics  # MuJoCo: the cameras' poses

        if int(chunk_size) < 1:
            raise WorldModelInputError(f"chunk_size: expected >= 1, got {chunk_size!r}")
        if num_threads is not None:
            torch.set_num_threads(int(num_threads))
        self.chunk_size = int(chunk_size)  # any length streams; this only bounds one call
        spec = load_contract(contract)
        groups = spec.joint_groups
        self.layout = ActionLayout.gesim(groups["left_arm"], groups["left_gripper"][0],
                                         groups["right_arm"], groups["right_gripper"][0])
        self.model = load_checkpoint(checkpoint or DEFAULT_CHECKPOINT,
                                     expected_joint_names=spec.arm_joint_names, expected_views=self.views)
        self._to_model = [self.layout.names.index(n) for n in self.model.joint_names]
        self._from_model = [self.model.joint_names.index(n) for n in self.layout.names]
        # The published state stays inside the G2's joint limits, as a measured one does.
        self._lower, self._upper = np.array([spec.joint_limits[n] for n in self.layout.names], np.float32).T
        self._kinematics = G2Kinematics(spec, self.views)
        cfg = self.model.net.config
        self.preferred_image_size = (cfg.reader_height, cfg.reader_width)
        self.reset()

    def reset(self) -> None:
        self.task = ""
        self._first: np.ndarray | None = None
        self._state: np.ndarray | None = None
        self._start_episode()

    def _start_episode(self) -> None:
        self._imagination: Imagination | None = None
        self._scenes: list[torch.Tensor] = []   # per step() call: (L, S) the imagined scene
        self._hands: list[torch.Tensor] = []    # and the grasp points the judge reads with it
        self._last_frame: np.ndarray | None = None

    def set_camera_params(self, intrinsic: np.ndarray, extrinsic: np.ndarray | None = None) -> None:
        # Checked for contract parity; the cameras' geometry comes from this backend's contract.
        validate_camera_params(intrinsic, extrinsic, self)

    def set_episode_data(self, first_frame: np.ndarray) -> None:
        self._first = validate_first_frame(first_frame, self)
        self._start_episode()

    def set_episode_state(self, state: np.ndarray) -> None:
        """Measured joints ``(16,)`` (GE-Sim layout) at the first frame. Without it (GE-Sim's own
        clients send none) the episode starts from the robot's home pose."""
        self._state = check_array("state", state, [("D", self.action_dim)])

    def set_episode_traj(self, traj: np.ndarray, c2w: np.ndarray) -> None:
        validate_episode_traj(traj, c2w, self)  # checked for contract parity; no band conditioning

    def set_task(self, task: str) -> None:
        """Task name (``pick_place``) or an instruction seen in training; read at the episode's
        first step by the scene reader and the dynamics, and by every judgement."""
        self.task = task

    def _task_tensor(self, task: str) -> torch.Tensor:
        return torch.tensor([self.model.task_id(task)])

    def _start_imagination(self) -> Imagination:
        cfg = self.model.net.config
        if self._state is None:
            joints = self._kinematics.complete({})
            state = np.array([joints[self._kinematics.contract.joint_names.index(n)] for n in self.model.joint_names],
                             np.float32)
        else:
            state = self._state[self._to_model]
            joints = self._kinematics.complete(dict(zip(self.layout.names, map(float, self._state))))
        images = self._first.transpose(1, 2, 3, 0)   # (V, H, W, 3)
        intrinsics, c2w = camera_geometry(self._kinematics, joints, (cfg.reader_height, cfg.reader_width))

        def at(size: tuple[int, int]) -> torch.Tensor:
            return torch.from_numpy(resize_images(images, *size)).permute(0, 3, 1, 2)[None]

        return Imagination(self.model.net, at((cfg.reader_height, cfg.reader_width)), torch.from_numpy(intrinsics)[None],
                           torch.from_numpy(c2w)[None], at((cfg.height, cfg.width)), self._task_tensor(self.task),
                           torch.from_numpy(state)[None])

    def step(self, actions: np.ndarray) -> StepResult:
        actions = validate_actions(actions, self)
        if self._first is None:
            raise WorldModelInputError("step: no episode data; call set_episode_data(first_frame) first")
        if self._imagination is None:
            self._imagination = self._start_imagination()
        out = self._imagination.advance(torch.from_numpy(actions[:, self._to_model])[None])
        cfg = self.model.net.config
        # Clamped before resizing: bilinear interpolation of values in [0, 1] stays in [0, 1].
        small = out.frames[0].clamp(0.0, 1.0).permute(0, 2, 1, 3, 4).numpy()  # (L, 3, V, h, w)
        height, width = self._first.shape[-2:]
        frames = resize_images(small.reshape(-1, cfg.height, cfg.width), height, width)
        state = np.clip(out.state[0][:, self._from_model].numpy(), self._lower, self._upper)
        result = StepResult(frames.reshape(*small.shape[:3], height, width), state)
        self._scenes.append(out.scene[0])
        self._hands.append(out.hands[0])
        self._last_frame = result.frames[-1]
        return result

    def scene_state(self) -> np.ndarray:
        """The imagined scene after every step of this episode so far, ``(steps, S)``, columns
        :data:`~gesim_ros.episodes.data.SCENE_STATE_NAMES` (m, unit quaternion, held and table contact
        as probabilities, forces in N): what the judge reads."""
        width = len(SCENE_STATE_NAMES)
        return torch.cat(self._scenes).numpy() if self._scenes else np.zeros((0, width), np.float32)

    def first_scene_state(self) -> np.ndarray:
        """The scene the model reads from the episode's first frame and joints alone, before any action,
        ``(S,)`` as :meth:`scene_state`'s rows (available once the episode has stepped)."""
        if self._imagination is None:
            raise WorldModelInputError("first_scene_state: the episode has not stepped yet; call step(actions) first")
        return self._imagination.first_scene[0].numpy()

    def judgement(self) -> JudgeResult:
        """Success probability and progress after every step of this episode so far (current task)."""
        return self._judge_latest(sum(len(x) for x in self._scenes), self.task)

    def judge(self, frames: np.ndarray, state: np.ndarray | None, task: str) -> JudgeResult:
        """Judge ``frames (T, 3, V, H, W)``, the last T frames this model's ``step`` returned (one
        call's or several consecutive calls'), for ``task``.

        The judge reads the imagined scene behind those frames, not pixels, so it can only score
        what this model just imagined; other frames raise :class:`WorldModelInputError`.
        """
        frames = np.asarray(frames)
        steps = sum(len(x) for x in self._scenes)
        if (self._last_frame is None or frames.ndim != 5 or not 0 < len(frames) <= steps
                or not np.array_equal(frames[-1], self._last_frame)):
            raise WorldModelInputError(
                "frames: the learned judge scores only the latest frames this model's step() returned in this "
                f"episode ({steps} so far): it judges the imagined scene behind them, not pixels")
        return self._judge_latest(len(frames), task)

    def _judge_latest(self, steps: int, task: str) -> JudgeResult:
        if steps == 0:
            return JudgeResult(np.zeros(0, np.float32), np.zeros(0, np.float32))
        total = sum(len(x) for x in self._scenes)
        index = torch.arange(total - steps, total)
        horizon = self.model.task_horizon(task)
        if horizon:  # outcomes are decided at the task's time limit (as the twin's checker does); past the
            index = index.clamp(max=horizon - 1)  # horizon the judge never trained, so its verdict stands
        # Each distinct step is judged once and repeated: the verdict past the horizon is the very value
        # computed at it (a batch of another size may round differently in the last bit).
        steps_judged, repeat = torch.unique(index, return_inverse=True)
        scene, hands = torch.cat(self._scenes)[steps_judged], torch.cat(self._hands)[steps_judged]
        with torch.no_grad():
            elapsed = (steps_judged + 1).float() * self.model.control_period_s   # after each step's action
            logits = self.model.net.judge_scene(scene[None], hands[None], self._task_tensor(task), elapsed[None])[0]
        probs = torch.sigmoid(logits)[repeat].numpy()
        return JudgeResult(probs[:, 0].copy(), probs[:, 1].copy())

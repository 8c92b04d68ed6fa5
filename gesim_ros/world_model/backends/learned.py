"""``learned``: the embedded default world model, a small action-conditioned latent video model.

GE-Sim 2.0 shaped (first observation + action chunks in, multi-view frames, joint state and a judge
out) but sized to run faster than real time on a 2-core CPU. Everything runs at a reduced internal
resolution (48x64 per view by default); the caller's frames are resized in and out.

* encoder: one conv net shared by the views (a learned view embedding tells them apart) turns the
  first observation, with x/y coordinate planes, into a feature vector per view (with the spatial
  soft-argmax of its second level: where things are) plus skip feature maps;
* dynamics: a GRU cell steps a latent through the actions ``frame_skip`` control steps at a time
  (3: 10 Hz latents for 30 Hz control). Its input is the k absolute targets, their offsets from the
  predicted joint positions, and those positions (proprioception);
* state expert: an MLP decoding from the latent the k joint positions (arm angles, gripper
  openings) of its control steps. They are fed back into the next step, so the rollout runs on the
  model's own proprioception, open loop, as it must once it replaces the robot;
* frame decoder: per view, upsamples the latent through the first observation's skip maps and
  blends its output with the first frame through a predicted mask, so the static scene is copied
  rather than re-generated; frames between latent steps are interpolated linearly;
* scene expert: an MLP decoding from the latent the task object's pose, whether it is held,
  whether the robot has hit the table, and the goal (``SCENE_STATE_NAMES``), as the state expert
  decodes the robot's; ``scene_state()`` gives it per step;
* hand expert: an MLP from the predicted joints to both tool positions, learned from the G2's
  forward kinematics;
* judge: an MLP on the decoded scene (the object relative to the goal and to the hands, its height
  and orientation, held, table contact) and the task embedding, giving success probability and progress; never on the
  raw latent or the actions. It is trained on the model's own open-loop imagined scenes (not on
  encodings of real frames), so at run time it judges the episode the model imagined, as GE-Sim's
  world judge does. (Format 1 checkpoints, still loadable, have no scene expert: their judge reads
  the latent.)

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

BACKEND_NAME = "learned"


class LearnedWorldModel(WorldModel, Judge):
    """The ``learned`` backend: a trained :class:`WorldModelNet` behind the GE-Sim-shaped interface.

    Actions and state use GE-Sim's ``[L7 arm, L grip, R7 arm, R grip]`` layout (``self.layout``
    names the joints). Frames come back at the size of the first frame. The imagined latent is kept
    between ``step`` calls of an episode; ``judgement()`` gives the judge's per-step success
    probability and progress for the whole episode so far.
    """

    views = GESIM_VIEWS
    image_size = None  # any size: resized to the model's resolution and back
    takes_episode_state = True

    def __init__(self, *, checkpoint: str | None = None, contract: str = DEFAULT_PROFILE,
                 chunk_size: int = 30, num_threads: int | None = 1) -> None:
        """``checkpoint``: path, default the one shipped in ``gesim_ros/models``; ``contract``:
        the profile whose arm and gripper joints the checkpoint must have been trained on;
        ``num_threads``: torch's CPU threads for the whole process (None: leave torch's setting).
        One thread predicts 1 s of control for 3 views in well under 0.1 s of CPU, and on a busy
        2-core machine is much faster than two, where the second mostly spins waiting."""
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
        # The published state stays inside the G2's joint limits, as a measured one does: far from its
        # training data (GE-Sim's demo episode) the state expert put a gripper aperture at -35 mm.
        self._lower, self._upper = np.array([spec.joint_limits[n] for n in self.layout.names], np.float32).T
        self.preferred_image_size = (self.model.net.config.height, self.model.net.config.width)
        self.reset()

    def reset(self) -> None:
        self.task = ""
        self._first: np.ndarray | None = None
        self._state: np.ndarray | None = None
        self._start_episode()

    def _start_episode(self) -> None:
        self._imagination: Imagination | None = None
        self._latents: list[torch.Tensor] = []      # per step() call: (L, D) latents behind its frames
        self._judge_states: list[torch.Tensor] = []  # and the joints the judge reads with them
        self._scenes: list[np.ndarray] = []          # and the scene decoded from them
        self._last_frame: np.ndarray | None = None

    def set_camera_params(self, intrinsic: np.ndarray, extrinsic: np.ndarray | None = None) -> None:
        # Checked for contract parity; the model is trained for the cameras of its training data.
        validate_camera_params(intrinsic, extrinsic, self)

    def set_episode_data(self, first_frame: np.ndarray) -> None:
        self._first = validate_first_frame(first_frame, self)
        self._start_episode()

    def set_episode_state(self, state: np.ndarray) -> None:
        """Measured joints ``(16,)`` (GE-Sim layout) at the first frame. Optional: without it the
        model estimates them from the first frame; with it the rollout starts from the truth."""
        self._state = check_array("state", state, [("D", self.action_dim)])

    def set_episode_traj(self, traj: np.ndarray, c2w: np.ndarray) -> None:
        validate_episode_traj(traj, c2w, self)  # checked for contract parity; no band conditioning

    def set_task(self, task: str) -> None:
        """Task name (``pick_place``) or an instruction seen in training; read at the episode's
        first step for the initial latent, and by every judgement."""
        self.task = task

    def _task_tensor(self, task: str) -> torch.Tensor:
        return torch.tensor([self.model.task_id(task)])

    def step(self, actions: np.ndarray) -> StepResult:
        actions = validate_actions(actions, self)
        if self._first is None:
            raise WorldModelInputError("step: no episode data; call set_episode_data(first_frame) first")
        cfg = self.model.net.config
        if self._imagination is None:
            images = resize_images(self._first.transpose(1, 2, 3, 0), cfg.height, cfg.width)  # (V, h, w, 3)
            state = None if self._state is None else torch.from_numpy(self._state[self._to_model])[None]
            self._imagination = Imagination(self.model.net, torch.from_numpy(images).permute(0, 3, 1, 2)[None],
                                            self._task_tensor(self.task), state)
        out = self._imagination.advance(torch.from_numpy(actions[:, self._to_model])[None])
        # Clamped before resizing: bilinear interpolation of values in [0, 1] stays in [0, 1].
        small = out.frames[0].clamp(0.0, 1.0).permute(0, 2, 1, 3, 4).numpy()  # (L, 3, V, h, w)
        height, width = self._first.shape[-2:]
        frames = resize_images(small.reshape(-1, cfg.height, cfg.width), height, width)
        state = np.clip(out.state[0][:, self._from_model].numpy(), self._lower, self._upper)
        result = StepResult(frames.reshape(*small.shape[:3], height, width), state)
        self._latents.append(out.latents[0])
        self._judge_states.append(out.judge_state[0])
        if out.scene is not None:
            self._scenes.append(out.scene[0].numpy())
        self._last_frame = result.frames[-1]
        return result

    def scene_state(self) -> np.ndarray:
        """The imagined scene after every step of this episode so far, ``(steps, 12)``, columns
        :data:`~gesim_ros.episodes.data.SCENE_STATE_NAMES` (m, unit quaternion, held and table contact
        as probabilities): what the judge reads."""
        self._require_scene_expert()
        width = len(SCENE_STATE_NAMES)
        return np.concatenate(self._scenes) if self._scenes else np.zeros((0, width), np.float32)

    def first_scene_state(self) -> np.ndarray:
        """The scene the model reads from the episode's first frame and joints alone, before any action,
        ``(12,)`` as :meth:`scene_state`'s rows (available once the episode has stepped)."""
        self._require_scene_expert()
        if self._imagination is None:
            raise WorldModelInputError("first_scene_state: the episode has not stepped yet; call step(actions) first")
        return self._imagination.first_scene[0].numpy()

    def _require_scene_expert(self) -> None:
        if not self.model.net.has_scene_expert:
            raise WorldModelInputError(f"checkpoint {self.model.path} has no scene expert (format 1); retrain it "
                                       "with 'gesim-ros train-wm'")

    def judgement(self) -> JudgeResult:
        """Success probability and progress after every step of this episode so far (current task)."""
        return self._judge_latest(sum(len(x) for x in self._latents), self.task)

    def judge(self, frames: np.ndarray, state: np.ndarray | None, task: str) -> JudgeResult:
        """Judge ``frames (T, 3, V, H, W)``, the last T frames this model's ``step`` returned (one
        call's or several consecutive calls'), for ``task``.

        The judge reads the imagined latents behind those frames, not pixels, so it can only score
        what this model just imagined; other frames raise :class:`WorldModelInputError`.
        """
        frames = np.asarray(frames)
        steps = sum(len(x) for x in self._latents)
        if (self._last_frame is None or frames.ndim != 5 or not 0 < len(frames) <= steps
                or not np.array_equal(frames[-1], self._last_frame)):
            raise WorldModelInputError(
                "frames: the learned judge scores only the latest frames this model's step() returned in this "
                f"episode ({steps} so far): it judges the imagined latents behind them, not pixels")
        return self._judge_latest(len(frames), task)

    def _judge_latest(self, steps: int, task: str) -> JudgeResult:
        if steps == 0:
            return JudgeResult(np.zeros(0, np.float32), np.zeros(0, np.float32))
        total = sum(len(x) for x in self._latents)
        index = torch.arange(total - steps, total)
        horizon = self.model.task_horizon(task)
        if horizon:  # outcomes are decided at the task's time limit (as the twin's checker does); past the
            index = index.clamp(max=horizon - 1)  # horizon the judge never trained, so its verdict stands
        # Each distinct step is judged once and repeated: the verdict past the horizon is the very value
        # computed at it (a batch of another size may round differently in the last bit).
        steps_judged, repeat = torch.unique(index, return_inverse=True)
        latents, q = torch.cat(self._latents)[steps_judged], torch.cat(self._judge_states)[steps_judged]
        with torch.no_grad():
            probs = torch.sigmoid(self.model.net.judge(latents, q, self._task_tensor(task)))[repeat].numpy()
        return JudgeResult(probs[:, 0].copy(), probs[:, 1].copy())


"""The learned world model's network and its open-loop imagination. The architecture is described in
:mod:`gesim_ros.world_model.backends.learned`.

Joint order inside the network is the policy's ``[L7 arm, R7 arm, L grip, R grip]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gesim_ros.episodes.data import SCENE_STATE_NAMES
from gesim_ros.world_model.backends.learned_dynamics import (
    ObjectDynamics,
    RolloutState,
    mlp,
    quat_from_yaw,
)
from gesim_ros.world_model.backends.learned_kinematics import HandKinematics
from gesim_ros.world_model.backends.learned_reader import (
    HALF_MEAN_M,
    HALF_SCALE_M,
    REFINE_HALF_MEAN_M,
    REFINE_HALF_UNIT_M,
    REFINE_OFFSET_UNIT_M,
    REFINE_OUTPUTS,
    YAW_NORM_GROUPS,
    PatchReader,
    SceneReader,
    object_patches,
    plane_maps,
)

# Column slices of SCENE_STATE_NAMES: object position, its quaternion (w x y z), held, table contact,
# goal, the object's half extents, the static and press contact forces.
OBJECT_POS, OBJECT_QUAT, HELD, TABLE_CONTACT, GOAL = slice(0, 3), slice(3, 7), 7, 8, slice(9, 12)
OBJECT_HALF, FORCES = slice(12, 15), slice(15, 17)


@dataclass(frozen=True)
class ModelConfig:
    """Network sizes. Stored in the checkpoint."""

    height: int = 48                              # the imagined frames' resolution per view
    width: int = 64
    reader_height: int = 80                       # the scene reader's view of the first frame
    reader_width: int = 128
    num_views: int = 3
    joint_dim: int = 16
    channels: tuple[int, ...] = (16, 32, 64, 64)  # frame encoder/decoder widths; each level halves H and W
    reader_channels: tuple[int, ...] = (16, 32, 32)  # scene reader convs (the second halves H and W)
    heatmaps: int = 16                            # scene reader heatmaps per view
    yaw_patch: int = 32                           # the yaw reader's top-down patch per view, cells a side
    yaw_patch_m: float = 0.10                     # and its side (m): the object and its surroundings
    yaw_channels: int = 32                        # the yaw reader's conv width
    latent_dim: int = 128                         # what the frame decoder renders from
    hidden_dim: int = 256                         # MLP width
    edge_dim: int = 128                           # per-hand interaction features of the dynamics
    task_dim: int = 16                            # task embedding (and the decoder's view embedding)

    def __post_init__(self) -> None:
        scale = 2 ** len(self.channels)
        if self.height % scale or self.width % scale or min(self.height, self.width) < scale:
            raise ValueError(f"model config: height and width must be positive multiples of {scale} "
                             f"(2 ** len(channels)), got {self.height}x{self.width}")
        if self.reader_height % 2 or self.reader_width % 2 or min(self.reader_height, self.reader_width) < 8:
            raise ValueError(f"model config: reader_height and reader_width must be even and >= 8, got "
                             f"{self.reader_height}x{self.reader_width}")
        if len(self.reader_channels) < 2:
            raise ValueError(f"model config: reader_channels needs at least 2 widths, got {self.reader_channels}")
        if self.yaw_patch % 8 or self.yaw_patch < 8 or not self.yaw_patch_m > 0:
            raise ValueError(f"model config: yaw_patch must be a positive multiple of 8 and yaw_patch_m > 0, got "
                             f"{self.yaw_patch} and {self.yaw_patch_m}")
        if self.yaw_channels % YAW_NORM_GROUPS or self.yaw_channels < YAW_NORM_GROUPS:
            raise ValueError(f"model config: yaw_channels must be a positive multiple of {YAW_NORM_GROUPS}, "
                             f"got {self.yaw_channels}")
        for name in ("num_views", "joint_dim", "heatmaps", "latent_dim", "hidden_dim", "edge_dim", "task_dim"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"model config: {name} must be >= 1, got {getattr(self, name)!r}")

    @property
    def gripper_dims(self) -> list[int]:
        return [self.joint_dim - 2, self.joint_dim - 1]

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"model config: unknown key(s) {unknown}; expected keys among {sorted(known)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def _vector(data: Mapping[str, Any], key: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    arr = np.asarray(data[key], dtype=np.float32)
    if arr.shape != shape or not np.isfinite(arr).all():
        raise ValueError(f"{what}.{key}: expected {shape} finite values, got shape {arr.shape}")
    return arr


@dataclass(frozen=True)
class Normalisation:
    """The training data's statistics: per-joint mean/std of the measured positions, the servo prior
    (per joint, ``learned_dynamics.SERVO_LAGS`` least-squares coefficients), the mean/std of the
    object's and the goal's positions (``[object xyz, goal xyz]``, m, world frame), and the height of
    the surface the robot works on (m): the lowest the measured fingertips go (their heights' 0.1th
    percentile), because the table stops them there."""

    state_mean: np.ndarray
    state_std: np.ndarray
    servo: np.ndarray
    scene_mean: np.ndarray
    scene_std: np.ndarray
    surface_z: float

    #: floors for std: a joint or goal that never moves in the data must not blow up when it does
    MIN_STD = 1e-2
    SURFACE_PERCENTILE = 0.1

    @classmethod
    def fit(cls, positions: np.ndarray, servo: np.ndarray, scene_positions: np.ndarray,
            fingertip_heights: np.ndarray) -> Normalisation:
        """``positions (N, J)`` measured joints, ``servo (J, L)``, ``scene_positions (M, 6)``, the
        measured fingertips' heights ``(K,)`` (m)."""
        def stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            x = np.asarray(x, dtype=np.float64)
            return x.mean(0).astype(np.float32), np.maximum(x.std(0), cls.MIN_STD).astype(np.float32)

        surface = float(np.percentile(np.asarray(fingertip_heights, np.float64), cls.SURFACE_PERCENTILE))
        return cls(*stats(positions), np.asarray(servo, np.float32), *stats(scene_positions), surface)

    def to_dict(self) -> dict:
        return {f.name: np.asarray(getattr(self, f.name)).tolist() for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], joint_dim: int) -> Normalisation:
        from gesim_ros.world_model.backends.learned_dynamics import SERVO_LAGS

        what = "normalisation"
        values = {"state_mean": _vector(data, "state_mean", (joint_dim,), what),
                  "state_std": _vector(data, "state_std", (joint_dim,), what),
                  "servo": _vector(data, "servo", (joint_dim, SERVO_LAGS), what),
                  "scene_mean": _vector(data, "scene_mean", (6,), what),
                  "scene_std": _vector(data, "scene_std", (6,), what),
                  "surface_z": float(_vector(data, "surface_z", (), what))}
        if (values["state_std"] <= 0).any() or (values["scene_std"] <= 0).any():
            raise ValueError("normalisation: std values must be positive")
        return cls(**values)


#: Scale of object-to-goal and object-to-hand offsets in the judge's input (m): task tolerances are a few cm.
_RELATIVE_SCALE_M = 0.05
#: Scale of the time since the episode's start in the judge's input (s): the twin's time limits are 7-10 s.
_ELAPSED_SCALE_S = 10.0


class _FrameEncoder(nn.Module):
    """Per-view conv net over the first frame: the skip maps the decoder paints the scene from."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        widths = (3, *cfg.channels[:-1])
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 4, stride=2, padding=1) for a, b in zip(widths, widths[1:]))
        self.view_embedding = nn.Parameter(torch.zeros(cfg.num_views, cfg.channels[0]))

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        batch = images.shape[0]
        x, skips = images.flatten(0, 1), []
        for level, conv in enumerate(self.convs):
            x = conv(x)
            if level == 0:
                x = x + self.view_embedding.repeat(batch, 1)[:, :, None, None]
            x = F.silu(x)
            skips.append(x)
        return skips


class _Decoder(nn.Module):
    """Latent + view -> frame, through the first observation's skip maps, blended with the first
    frame by a predicted mask (where the scene did not change the decoder only has to say so)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        levels = len(cfg.channels)
        self.start_shape = (cfg.channels[-1], cfg.height >> levels, cfg.width >> levels)
        self.view_embedding = nn.Embedding(cfg.num_views, cfg.task_dim)
        self.fc = nn.Linear(cfg.latent_dim + cfg.task_dim, int(np.prod(self.start_shape)))
        ups, width = [], cfg.channels[-1]
        for skip_width in reversed(cfg.channels[:-1]):
            ups.append(nn.Conv2d(width + skip_width, skip_width, 3, padding=1))
            width = skip_width
        self.ups = nn.ModuleList(ups)
        self.out1 = nn.Conv2d(width + 3, cfg.channels[0], 3, padding=1)
        self.out2 = nn.Conv2d(cfg.channels[0], 4, 3, padding=1)

    def forward(self, latents: torch.Tensor, skips: Sequence[torch.Tensor], first: torch.Tensor) -> torch.Tensor:
        """``latents (N, D)``, ``skips[i] (N * V, C_i, h_i, w_i)``, ``first (N, V, 3, H, W)`` -> ``(N, V, 3, H, W)``."""
        n, views = first.shape[:2]
        view_ids = torch.arange(views, device=latents.device).repeat(n)
        x = torch.cat([latents.repeat_interleave(views, 0), self.view_embedding(view_ids)], 1)
        x = F.silu(self.fc(x)).view(n * views, *self.start_shape)
        for conv, skip in zip(self.ups, reversed(skips)):
            x = F.interpolate(x, size=skip.shape[-2:], mode="nearest")
            x = F.silu(conv(torch.cat([x, skip], 1)))
        base = first.flatten(0, 1)
        x = F.interpolate(x, size=base.shape[-2:], mode="nearest")
        out = self.out2(F.silu(self.out1(torch.cat([x, base], 1))))
        mask = torch.sigmoid(out[:, 3:])
        frames = mask * torch.sigmoid(out[:, :3]) + (1 - mask) * base
        return frames.view(n, views, 3, *base.shape[-2:])


class WorldModelNet(nn.Module):
    """The network: scene reader, object-centric dynamics, frame renderer and judge. Joint tensors
    are raw (radians, gripper openings in metres) in the checkpoint's order ``[L7, R7, L grip, R grip]``."""

    def __init__(self, config: ModelConfig, num_tasks: int, normalisation: Normalisation,
                 kinematics: HandKinematics | None = None) -> None:
        super().__init__()
        cfg = self.config = config
        self.normalisation = normalisation
        for name in ("state_mean", "state_std", "scene_mean", "scene_std"):
            # Not in state_dict: the checkpoint stores them once, readable, under "normalisation".
            self.register_buffer(name, torch.from_numpy(np.asarray(getattr(normalisation, name))).clone(),
                                 persistent=False)
        self.task_embedding = nn.Embedding(num_tasks, cfg.task_dim)
        self.reader = SceneReader(cfg.num_views, cfg.reader_channels, cfg.heatmaps, cfg.joint_dim, cfg.task_dim,
                                  cfg.hidden_dim)
        self.yaw_reader = PatchReader(cfg.num_views, cfg.yaw_channels, cfg.yaw_patch, cfg.hidden_dim, 2)
        self.object_refiner = PatchReader(cfg.num_views, cfg.yaw_channels, cfg.yaw_patch, cfg.hidden_dim, REFINE_OUTPUTS)
        self.dynamics = ObjectDynamics(cfg.joint_dim, num_tasks, cfg.task_dim, cfg.hidden_dim, cfg.edge_dim,
                                       kinematics or HandKinematics())
        self.dynamics.set_statistics(torch.from_numpy(np.asarray(normalisation.servo)), self.state_mean,
                                     self.state_std, cfg.gripper_dims, float(normalisation.scene_mean[2]),
                                     normalisation.surface_z)
        self.frame_encoder = _FrameEncoder(cfg)
        self.to_latent = mlp(cfg.joint_dim + 3 + 4 + 1 + 3 + cfg.task_dim, cfg.hidden_dim, cfg.latent_dim)
        self.decoder = _Decoder(cfg)
        # The judge's own task embedding: its stage, trained last, must not move the one the reader
        # and the renderer were trained with.
        self.judge_task_embedding = nn.Embedding(num_tasks, cfg.task_dim)
        self.judge_head = mlp(self.judge_features_dim + cfg.task_dim, cfg.hidden_dim, 2)

    #: the object's height (1), object-to-goal offset (3) and its horizontal distance (1), the object's
    #: quaternion (4), held and table contact (2), object-to-hand offsets (6) and the distance to the
    #: nearer hand (1), and the time since the episode's start (1). Relations, not where on the table: a
    #: judge of absolute positions could learn the training scenes' layouts, and a scene elsewhere is
    #: judged as one of them (issue #17's scene probe).
    judge_features_dim = 19

    def normalise_state(self, q: torch.Tensor) -> torch.Tensor:
        return (q - self.state_mean) / self.state_std

    # -- the first frame --------------------------------------------------------------------------
    def planes(self, intrinsics: torch.Tensor, c2w: torch.Tensor) -> torch.Tensor:
        """Plane maps ``(B, V, 3, h, w)`` at the reader's size for cameras ``intrinsics (B, V, 3, 3)``
        (pixels at the reader's size) and ``c2w (B, V, 4, 4)``."""
        cfg = self.config
        return plane_maps(intrinsics, c2w, cfg.reader_height, cfg.reader_width, self.scene_mean[2], self.scene_mean[:2])

    def read_scene(self, images: torch.Tensor, planes: torch.Tensor, q: torch.Tensor,
                   task: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The reader's first pass, raw ``(B, READER_OUTPUTS)``, and its views' heatmap logits for the
        first frame ``images (B, V, 3, h, w)`` at the reader's size, its ``planes``, the measured joints
        ``q (B, J)`` (raw) and tasks ``(B,)``."""
        return self.reader(images, planes, self.normalise_state(q), self.task_embedding(task))

    def object_patches(self, images: torch.Tensor, intrinsics: torch.Tensor, c2w: torch.Tensor, centre: torch.Tensor,
                       angle: torch.Tensor) -> torch.Tensor:
        """The second pass's input: the first frame ``images`` at the reader's size (cameras
        ``intrinsics``, ``c2w``) resampled around ``centre (B, 3)`` (m, the object's top face), the patches'
        x axis at ``angle (B,)`` from the world's. The yaw reader and the object refiner read them."""
        cfg = self.config
        return object_patches(images, intrinsics, c2w, centre, angle, cfg.yaw_patch, cfg.yaw_patch_m)

    def scene_from_reading(self, raw: torch.Tensor) -> dict[str, torch.Tensor]:
        """Object position, half extents and goal (m) from the first pass's raw output."""
        return {"pos": raw[:, :3] * self.scene_std[:3] + self.scene_mean[:3],
                "half": (HALF_MEAN_M + HALF_SCALE_M * raw[:, 3:6]).clamp(min=1e-3),
                "goal": raw[:, 6:9] * self.scene_std[3:] + self.scene_mean[3:]}

    def read_first_frame(self, images: torch.Tensor, intrinsics: torch.Tensor, c2w: torch.Tensor, q: torch.Tensor,
                         task: torch.Tensor) -> dict[str, torch.Tensor]:
        """The scene as the node starts it: object position, quaternion (a yaw in (-45, 45] degrees),
        half extents and goal (m), from the first frame ``images (B, V, 3, h, w)`` at the reader's size,
        its cameras ``intrinsics (B, V, 3, 3)`` (pixels at that size) and ``c2w (B, V, 4, 4)``, the
        measured joints ``q (B, J)`` (raw) and tasks ``(B,)``. The yaw, the object's horizontal position
        and its horizontal size are read again around the object where the first pass put it."""
        read = self.scene_from_reading(self.read_scene(images, self.planes(intrinsics, c2w), q, task)[0])
        top = read["pos"] + F.pad(read["half"][:, 2:], (2, 0))
        patches = self.object_patches(images, intrinsics, c2w, top, torch.zeros(len(images)))
        turn, refined = self.yaw_reader(patches), self.object_refiner(patches)
        pos = torch.cat([read["pos"][:, :2] + REFINE_OFFSET_UNIT_M * refined[:, :2], read["pos"][:, 2:]], 1)
        # The refined horizontal half size, its mean over x and y: the first pass's difference between
        # them (the plug's) is kept, and its height, which a top-down patch does not show.
        shift = REFINE_HALF_MEAN_M + REFINE_HALF_UNIT_M * refined[:, 2:] - read["half"][:, :2].mean(1, keepdim=True)
        half = torch.cat([read["half"][:, :2] + shift, read["half"][:, 2:]], 1).clamp(min=1e-3)
        return {**read, "pos": pos, "half": half,
                "quat": quat_from_yaw(torch.atan2(turn[:, 1], turn[:, 0]) / 4)}

    # -- frames -------------------------------------------------------------------------------------
    def encode_frames(self, first: torch.Tensor) -> list[torch.Tensor]:
        """Skip maps of the first frame ``(B, V, 3, h, w)`` at the frames' resolution."""
        return self.frame_encoder(first)

    def render_latent(self, q: torch.Tensor, pos: torch.Tensor, quat: torch.Tensor, held: torch.Tensor,
                      half: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        """What the decoder paints a frame from: the joints and the object's state ``(N, ...)``."""
        pos_n = (pos - self.scene_mean[:3]) / self.scene_std[:3]
        quat = quat * torch.where(quat[:, :1] < 0, -1.0, 1.0)
        return self.to_latent(torch.cat([self.normalise_state(q), pos_n, quat, held[:, None],
                                         (half - HALF_MEAN_M) / HALF_SCALE_M, self.task_embedding(task)], 1))

    def decode(self, latents: torch.Tensor, episode: torch.Tensor, skips: Sequence[torch.Tensor],
               first: torch.Tensor) -> torch.Tensor:
        """Frames ``(N, V, 3, h, w)`` for ``latents (N, D)`` of episodes ``episode (N,)``, whose first
        observations are ``first (B, V, 3, h, w)`` with encoder ``skips`` (``(B * V, ...)`` each)."""
        views = first.shape[1]
        rows = (episode[:, None] * views + torch.arange(views, device=episode.device)).flatten()
        return self.decoder(latents, [s[rows] for s in skips], first[episode])

    # -- the judge ------------------------------------------------------------------------------------
    def judge_scene(self, scene: torch.Tensor, hands: torch.Tensor, task: torch.Tensor,
                    elapsed_s: torch.Tensor) -> torch.Tensor:
        """Logits ``(..., 2)``, success and progress, from a scene state ``(..., S)`` in
        SCENE_STATE_NAMES units (imagined or recorded), the grasp points of both hands ``(..., 2, 3)``,
        the task ``(B,)`` and the time since the episode's start ``(...)`` (s): where the object is
        relative to the goal and to the hands, whether it is held, whether the robot hit something, and
        how much time is left to get there (a block halfway to its target is on its way early and a
        miss at the time limit). Not the joints or the actions: the arm's pose is how a scripted failure
        shows in the actions (issue #17)."""
        obj, goal = scene[..., OBJECT_POS], scene[..., GOAL]
        rel = (obj - goal) / _RELATIVE_SCALE_M
        to_hands = (obj[..., None, :] - hands) / _RELATIVE_SCALE_M
        quat = scene[..., OBJECT_QUAT] * torch.where(scene[..., OBJECT_QUAT][..., :1] < 0, -1.0, 1.0)
        height = (obj[..., 2:] - self.scene_mean[2]) / self.scene_std[2]
        features = torch.cat([height, rel, rel[..., :2].norm(dim=-1, keepdim=True), quat,
                              scene[..., HELD:TABLE_CONTACT + 1], to_hands.flatten(-2),
                              to_hands.norm(dim=-1).min(-1, keepdim=True).values,
                              elapsed_s[..., None] / _ELAPSED_SCALE_S], -1)
        emb = self.judge_task_embedding(task)
        emb = emb.view(*emb.shape[:1], *([1] * (features.dim() - 2)), -1).expand(*features.shape[:-1], -1)
        return self.judge_head(torch.cat([features, emb], -1))

    def grasp_points(self, q: torch.Tensor) -> torch.Tensor:
        """Both hands' grasp points ``(..., 2, 3)`` for raw joints ``(..., J)``."""
        return self.dynamics.kinematics(q)[2][..., 0, :]


def scene_row(state: RolloutState, half: torch.Tensor, goal: torch.Tensor, forces: torch.Tensor) -> torch.Tensor:
    """An imagined state as SCENE_STATE_NAMES columns ``(B, S)`` (forces in N)."""
    return torch.cat([state.pos, state.quat, state.held[:, None], state.contact[:, None], goal, half, forces], 1)


def resize_images(images: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize a stack of images ``(N, H, W)`` or ``(N, H, W, C)`` (uint8 or float) to ``height x width``.

    Area interpolation when shrinking (it averages, so small objects do not alias away), bilinear
    when enlarging. Training and inference both come through here, so the model sees identically
    prepared images. OpenCV per image: ~15x faster than torch's interpolate on one CPU thread.
    """
    if images.shape[1:3] == (height, width):
        return images
    interp = cv2.INTER_AREA if images.shape[1] >= height and images.shape[2] >= width else cv2.INTER_LINEAR
    out = np.empty((len(images), height, width, *images.shape[3:]), images.dtype)
    for i, image in enumerate(images):
        out[i] = cv2.resize(image, (width, height), interpolation=interp)
    return out


@dataclass
class Imagined:
    """One :meth:`Imagination.advance` result, per control step (raw joints, checkpoint order)."""

    frames: torch.Tensor     # (B, L, V, 3, h, w) the frames' resolution
    state: torch.Tensor      # (B, L, J)
    scene: torch.Tensor      # (B, L, S) SCENE_STATE_NAMES columns
    hands: torch.Tensor      # (B, L, 2, 3) the grasp points the judge reads with it


class Imagination:
    """Open-loop imagination of B episodes from their first observations, fed action chunks of any
    length: the state advances one control step per action, so chunking never changes the result.
    Frames are decoded every ``frame_skip`` steps of the episode and at the end of every chunk, and
    blended linearly between."""

    def __init__(self, net: WorldModelNet, reader_images: torch.Tensor, intrinsics: torch.Tensor, c2w: torch.Tensor,
                 first: torch.Tensor, task: torch.Tensor, state: torch.Tensor, frame_skip: int = 3,
                 decode_batch: int = 64) -> None:
        """``reader_images (B, V, 3, H, W)`` the first frame at the reader's size, its cameras
        ``intrinsics (B, V, 3, 3)`` (pixels at that size) and ``c2w (B, V, 4, 4)``, ``first (B, V, 3,
        h, w)`` at the frames' size, ``state (B, J)`` measured raw joints."""
        self.net, self.task, self.first = net, task, first
        self.frame_skip, self.decode_batch = frame_skip, decode_batch
        with torch.no_grad():
            read = net.read_first_frame(reader_images, intrinsics, c2w, state, task)
            self.skips = net.encode_frames(first)
        self.half, self.goal = read["half"], read["goal"]
        self._start = (state, read["pos"], read["quat"])
        self.state: RolloutState | None = None   # set by the first action (it fills the target history)
        forces = torch.zeros(len(state), 2)
        zero = torch.zeros(len(state))
        # The scene read from the first frame alone, before any action: where the model puts the object.
        self.first_scene = torch.cat([read["pos"], read["quat"], zero[:, None], zero[:, None], self.goal, self.half,
                                      forces], 1)
        self.steps = 0
        self.keyframe, self.keyframe_step = first, 0

    @torch.no_grad()
    def advance(self, actions: torch.Tensor) -> Imagined:
        """Predict after each of ``actions (B, L, J)`` (raw targets)."""
        states, scene = self.advance_state(actions)
        frames = self._frames(states)
        self.steps += len(states)
        return Imagined(frames=frames, state=torch.stack([s.q for s in states], 1), scene=scene,
                        hands=torch.stack([s.hands[:, :, 0] for s in states], 1))

    @torch.no_grad()
    def advance_state(self, actions: torch.Tensor) -> tuple[list[RolloutState], torch.Tensor]:
        """The state after each of ``actions (B, L, J)``, and the scene ``(B, L, S)``, without frames
        (what training imagines for the judge; :meth:`advance` adds the frames)."""
        dynamics = self.net.dynamics
        if self.state is None:
            q0, pos, quat = self._start
            self.state = dynamics.initial_state(q0, actions[:, 0], pos, quat)
        _, _, target_hands = dynamics.kinematics(actions)
        states, scenes = [], []
        for i in range(actions.shape[1]):
            self.state, out = dynamics.step(self.state, actions[:, i], target_hands[:, i], self.half, self.goal, self.task)
            states.append(self.state)
            scenes.append(scene_row(self.state, self.half, self.goal, ObjectDynamics.forces_newton(out.forces)))
        return states, torch.stack(scenes, 1)

    def _frames(self, states: list[RolloutState]) -> torch.Tensor:
        """Decoded at every frame_skip-th step of the episode and at the chunk's last; blended between."""
        net, batch = self.net, self.first.shape[0]
        last = len(states) - 1
        picks = [i for i in range(len(states)) if (self.steps + i + 1) % self.frame_skip == 0 or i == last]
        latents = torch.stack([net.render_latent(states[i].q, states[i].pos, states[i].quat, states[i].held, self.half,
                                                 self.task) for i in picks], 1).flatten(0, 1)
        episode = torch.arange(batch).repeat_interleave(len(picks))
        keys = torch.cat([net.decode(latents[i:i + self.decode_batch], episode[i:i + self.decode_batch], self.skips,
                                     self.first) for i in range(0, len(latents), self.decode_batch)])
        keys = keys.view(batch, len(picks), *self.first.shape[1:])
        frames, previous, previous_step, j = [], self.keyframe, self.keyframe_step, 0
        for k, i in enumerate(picks):
            step = self.steps + i + 1
            for j in range(j, i + 1):
                w = (self.steps + j + 1 - previous_step) / (step - previous_step)
                frames.append(previous * (1 - w) + keys[:, k] * w)
            j = i + 1
            previous, previous_step = keys[:, k], step
        self.keyframe, self.keyframe_step = previous, previous_step
        return torch.stack(frames, 1)

"""The learned world model's network: a small action-conditioned latent video model and its open-loop
imagination. The architecture is described in :mod:`gesim_ros.world_model.backends.learned`.

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

# Column slices of SCENE_STATE_NAMES: object position, its quaternion (w x y z), held, table contact, goal.
OBJECT_POS, OBJECT_QUAT, HELD, TABLE_CONTACT, GOAL = slice(0, 3), slice(3, 7), 7, 8, slice(9, 12)
JUDGE_INPUTS = ("scene", "latent")


@dataclass(frozen=True)
class ModelConfig:
    """Network sizes. Stored in the checkpoint; the defaults give a 1.4 M parameter model (5.5 MB)."""

    height: int = 48                              # internal resolution per view
    width: int = 64
    num_views: int = 3
    joint_dim: int = 16
    frame_skip: int = 3                           # control steps per latent step
    channels: tuple[int, ...] = (16, 32, 64, 64)  # encoder conv widths; each level halves H and W
    view_dim: int = 128                           # encoder feature size per view
    latent_dim: int = 256
    hidden_dim: int = 256                         # MLP width (state expert, judge, init)
    task_dim: int = 16                            # task embedding (and the decoder's view embedding)
    coord_channels: bool = True                   # x/y coordinate planes beside RGB, so features can say where
    keypoints: bool = True                        # spatial soft-argmax points of the second conv level in the features
    # "scene": the judge reads the scene expert's decoded scene and the decoded joints (format 2);
    # "latent": format 1's judge on the raw latent, kept only to load the checkpoints made with it.
    judge_input: str = "scene"

    def __post_init__(self) -> None:
        scale = 2 ** len(self.channels)
        if self.height % scale or self.width % scale or min(self.height, self.width) < scale:
            raise ValueError(f"model config: height and width must be positive multiples of {scale} "
                             f"(2 ** len(channels)), got {self.height}x{self.width}")
        for name in ("num_views", "joint_dim", "frame_skip", "view_dim", "latent_dim", "hidden_dim", "task_dim"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"model config: {name} must be >= 1, got {getattr(self, name)!r}")
        if self.judge_input not in JUDGE_INPUTS:
            raise ValueError(f"model config: judge_input must be one of {list(JUDGE_INPUTS)}, got {self.judge_input!r}")

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"model config: unknown key(s) {unknown}; expected keys among {sorted(known)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


@dataclass(frozen=True)
class Normalisation:
    """Per-joint mean/std of measured joint positions (state) and of commanded targets (actions)."""

    state_mean: np.ndarray
    state_std: np.ndarray
    action_mean: np.ndarray
    action_std: np.ndarray

    #: floor for std: joints that never move in the data (an idle arm) must not blow up to huge
    #: normalised values when they do move at run time (rad for arms, m for gripper openings).
    MIN_STD = 1e-2

    @classmethod
    def fit(cls, positions: np.ndarray, actions: np.ndarray) -> Normalisation:
        def stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            x = np.asarray(x, dtype=np.float64)
            return x.mean(0).astype(np.float32), np.maximum(x.std(0), cls.MIN_STD).astype(np.float32)

        return cls(*stats(positions), *stats(actions))

    def to_dict(self) -> dict:
        return {f.name: [float(x) for x in getattr(self, f.name)] for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], joint_dim: int) -> Normalisation:
        values = {}
        for f in fields(cls):
            arr = np.asarray(data[f.name], dtype=np.float32)
            if arr.shape != (joint_dim,) or not np.isfinite(arr).all():
                raise ValueError(f"normalisation.{f.name}: expected {joint_dim} finite values, got shape {arr.shape}")
            values[f.name] = arr
        if (values["state_std"] <= 0).any() or (values["action_std"] <= 0).any():
            raise ValueError("normalisation: std values must be positive")
        return cls(**values)


@dataclass(frozen=True)
class SceneNormalisation:
    """Mean/std of the object's and the goal's positions (m, world frame; ``[object xyz, goal xyz]``),
    fitted on the training data's recorded scene states."""

    mean: np.ndarray
    std: np.ndarray

    MIN_STD = 1e-2  # m: a goal that never moves in the data must not blow up when it does

    @classmethod
    def fit(cls, scene: np.ndarray | None) -> SceneNormalisation:
        """From recorded scene states ``(N, 12)``; None (no episode has any): identity."""
        if scene is None or not len(scene):
            return cls(np.zeros(6, np.float32), np.ones(6, np.float32))
        pos = np.concatenate([scene[:, OBJECT_POS], scene[:, GOAL]], 1).astype(np.float64)
        return cls(pos.mean(0).astype(np.float32), np.maximum(pos.std(0), cls.MIN_STD).astype(np.float32))

    def to_dict(self) -> dict:
        return {"mean": [float(x) for x in self.mean], "std": [float(x) for x in self.std]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SceneNormalisation:
        mean, std = (np.asarray(data[k], np.float32) for k in ("mean", "std"))
        if mean.shape != (6,) or std.shape != (6,) or not (np.isfinite(mean).all() and np.isfinite(std).all()):
            raise ValueError(f"scene_normalisation: expected 6 finite means and stds, got shapes {mean.shape}, {std.shape}")
        if (std <= 0).any():
            raise ValueError("scene_normalisation: std values must be positive")
        return cls(mean, std)


#: Scale of object-to-goal offsets in the judge's input (m): task tolerances are a few cm.
_RELATIVE_SCALE_M = 0.05
#: Scale of the hand expert's output around the objects' mean position (m): about an arm's reach
#: over the table, so its outputs stay near 1 (at 5 cm they had to reach 10 and learned slowly).
_HAND_RANGE_M = 0.25


def _mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                         nn.Linear(hidden, outputs))


class _Encoder(nn.Module):
    """Shared per-view conv net: features ``(B, V * view_dim)`` and skip maps for the decoder."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        widths = (5 if cfg.coord_channels else 3, *cfg.channels)
        self.coord_channels = cfg.coord_channels
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 4, stride=2, padding=1) for a, b in zip(widths, widths[1:]))
        self.view_embedding = nn.Parameter(torch.zeros(cfg.num_views, cfg.channels[0]))
        scale = 2 ** len(cfg.channels)
        self.fc = nn.Linear(cfg.channels[-1] * (cfg.height // scale) * (cfg.width // scale), cfg.view_dim)
        # Where each feature of the second level peaks (its soft-argmax x, y): object positions survive
        # the coarse last level, which a scene expert needs from a few hundred episodes.
        self.keypoint_level = min(1, len(cfg.channels) - 1)
        self.keypoints = nn.Linear(2 * cfg.channels[self.keypoint_level], cfg.view_dim) if cfg.keypoints else None

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        batch, views = images.shape[:2]
        x = images.flatten(0, 1)
        if self.coord_channels:
            h, w = x.shape[-2:]
            ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
            x = torch.cat([x, torch.stack([xs, ys]).expand(len(x), -1, -1, -1)], 1)
        skips = []
        for level, conv in enumerate(self.convs):
            x = conv(x)
            if level == 0:
                x = x + self.view_embedding.repeat(batch, 1)[:, :, None, None]
            x = F.silu(x)
            skips.append(x)
        features = self.fc(x.flatten(1))
        if self.keypoints is not None:
            level = skips[self.keypoint_level]
            h, w = level.shape[-2:]
            weights = torch.softmax(level.flatten(2), -1).view(*level.shape)
            xs, ys = (weights.sum(2) * torch.linspace(-1, 1, w)).sum(-1), (weights.sum(3) * torch.linspace(-1, 1, h)).sum(-1)
            features = features + self.keypoints(torch.cat([xs, ys], 1))
        return features.view(batch, -1), skips[:-1]


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
    """The network. Joint tensors are normalised unless a method says raw; raw joints are in the
    checkpoint's order ``[L7, R7, L grip, R grip]``."""

    def __init__(self, config: ModelConfig, num_tasks: int, normalisation: Normalisation,
                 scene_normalisation: SceneNormalisation | None = None) -> None:
        super().__init__()
        cfg = self.config = config
        joints, skip = cfg.joint_dim, cfg.frame_skip
        obs_dim = cfg.num_views * cfg.view_dim
        self.encoder = _Encoder(cfg)
        self.decoder = _Decoder(cfg)
        self.task_embedding = nn.Embedding(num_tasks, cfg.task_dim)
        self.init_latent = nn.Sequential(nn.Linear(obs_dim + joints + cfg.task_dim, cfg.latent_dim), nn.Tanh())
        self.state_from_image = _mlp(obs_dim, cfg.hidden_dim, joints)
        self.cell = nn.GRUCell(2 * skip * joints + joints, cfg.latent_dim)
        self.state_expert = _mlp(cfg.latent_dim + joints, cfg.hidden_dim, skip * joints)
        if cfg.judge_input == "scene":
            # Decodes SCENE_STATE_NAMES from the latent, the decoded joints (where the hand is says where a
            # held object is) and the task (which object is the task's): normalised positions, raw
            # quaternion, held and table-contact logits. The judge reads only its output, the hands
            # and the task.
            self.scene_expert = _mlp(cfg.latent_dim + joints + cfg.task_dim, cfg.hidden_dim, len(SCENE_STATE_NAMES))
            # Normalised joints -> both tool (hand) positions in the scene's frame, learned from the G2's forward
            # kinematics of the recorded joints: where the hands are, for the judge's object-to-hand offsets.
            self.hand_expert = _mlp(joints, cfg.hidden_dim, 6)
            self.judge_head = _mlp(self.scene_features_dim + cfg.task_dim, cfg.hidden_dim, 2)
        else:
            self.judge_head = _mlp(cfg.latent_dim + joints + cfg.task_dim, cfg.hidden_dim, 2)
        self.normalisation = normalisation
        self.scene_normalisation = scene_normalisation or SceneNormalisation.fit(None)
        for name in ("state_mean", "state_std", "action_mean", "action_std"):
            # Not in state_dict: the checkpoint stores them once, readable, under "normalisation".
            self.register_buffer(name, torch.from_numpy(getattr(normalisation, name)).clone(), persistent=False)
        for name in ("mean", "std"):
            self.register_buffer(f"scene_{name}", torch.from_numpy(getattr(self.scene_normalisation, name)).clone(),
                                 persistent=False)

    #: the object's height (1), object-to-goal offset (3) and its horizontal distance (1), the object's
    #: quaternion (4), held and table contact (2), object-to-hand offsets (6) and the distance to the
    #: nearer hand (1). Relations, not where on the table: a judge of absolute positions could learn the
    #: training scenes' layouts, and a scene elsewhere is judged as one of them (issue #17's scene probe).
    scene_features_dim = 18

    @property
    def has_scene_expert(self) -> bool:
        return self.config.judge_input == "scene"

    def normalise_state(self, q: torch.Tensor) -> torch.Tensor:
        return (q - self.state_mean) / self.state_std

    def denormalise_state(self, q: torch.Tensor) -> torch.Tensor:
        return q * self.state_std + self.state_mean

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``images (B, V, 3, H, W)`` in [0, 1] at the internal resolution."""
        return self.encoder(images)

    def initial_latent(self, features: torch.Tensor, q: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        return self.init_latent(torch.cat([features, q, self.task_embedding(task)], 1))

    def rollout(self, h: torch.Tensor, q: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Step the latent through raw ``actions (B, G * k, J)``; returns latents ``(B, G, D)`` and
        the state expert's joints ``(B, G * k, J)``, each step fed the previous step's prediction."""
        batch, steps, joints = actions.shape
        skip = self.config.frame_skip
        if steps % skip:
            raise ValueError(f"rollout: {steps} actions is not a multiple of frame_skip {skip}")
        a_norm = ((actions - self.action_mean) / self.action_std).view(batch, -1, skip * joints)
        a_state = self.normalise_state(actions).view(batch, -1, skip, joints)
        latents, states = [], []
        for g in range(steps // skip):
            x = torch.cat([a_norm[:, g], (a_state[:, g] - q[:, None]).flatten(1), q], 1)
            h = self.cell(x, h)
            sub = q[:, None] + self.state_expert(torch.cat([h, q], 1)).view(batch, skip, joints)
            q = sub[:, -1]
            latents.append(h)
            states.append(sub)
        return torch.stack(latents, 1), torch.cat(states, 1)

    def decode(self, latents: torch.Tensor, episode: torch.Tensor, skips: Sequence[torch.Tensor],
               first: torch.Tensor) -> torch.Tensor:
        """Frames ``(N, V, 3, H, W)`` for ``latents (N, D)`` of episodes ``episode (N,)``, whose first
        observations are ``first (B, V, 3, H, W)`` with encoder ``skips`` (``(B * V, ...)`` each)."""
        views = first.shape[1]
        rows = (episode[:, None] * views + torch.arange(views, device=episode.device)).flatten()
        return self.decoder(latents, [s[rows] for s in skips], first[episode])

    def scene_raw(self, latents: torch.Tensor, q: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        """The scene expert's raw output ``(..., 12)`` for latents ``(B, ..., D)``, the normalised joints
        decoded with them ``(B, ..., J)`` and tasks ``(B,)`` (what the losses read)."""
        if not self.has_scene_expert:
            raise ValueError("this model has no scene expert (a format 1 checkpoint); retrain it with train-wm")
        return self.scene_expert(torch.cat([latents, q, self._task_like(task, q)], -1))

    def scene_from_raw(self, raw: torch.Tensor) -> torch.Tensor:
        """Raw scene-expert output -> scene state in SCENE_STATE_NAMES units: positions in m, a unit
        quaternion with w >= 0 (q and -q are the same rotation), held and table contact as probabilities."""
        pos = torch.cat([raw[..., OBJECT_POS], raw[..., GOAL]], -1) * self.scene_std + self.scene_mean
        quat = F.normalize(raw[..., OBJECT_QUAT], dim=-1)
        quat = quat * torch.where(quat[..., :1] < 0, -1.0, 1.0)
        flags = torch.sigmoid(raw[..., HELD:TABLE_CONTACT + 1])
        return torch.cat([pos[..., :3], quat, flags, pos[..., 3:]], -1)

    def hands(self, q: torch.Tensor) -> torch.Tensor:
        """Left and right tool positions ``(..., 2, 3)`` (m, the scene's frame) for normalised joints ``(..., J)``."""
        return (self.hand_expert(q) * _HAND_RANGE_M).unflatten(-1, (2, 3)) + self.scene_mean[:3]

    def scene(self, latents: torch.Tensor, q: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        """Decoded scene state ``(B, ..., 12)`` (columns SCENE_STATE_NAMES); arguments as :meth:`scene_raw`."""
        return self.scene_from_raw(self.scene_raw(latents, q, task))

    def judge_scene(self, scene: torch.Tensor, q: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        """Logits ``(..., 2)``, success and progress, from a scene state ``(..., 12)`` in
        SCENE_STATE_NAMES units (decoded or recorded), normalised joints ``(..., J)`` (for where the
        hands are) and the task: where the object is relative to the goal and to the hands, whether
        it is held, whether the robot hit the table. Not the joints themselves: the arm's pose is how
        a scripted failure shows in the actions (issue #17)."""
        obj, goal = scene[..., OBJECT_POS], scene[..., GOAL]
        rel = (obj - goal) / _RELATIVE_SCALE_M
        # Detached: the hand expert learns from kinematics only, never from the outcome.
        to_hands = (obj[..., None, :] - self.hands(q).detach()) / _RELATIVE_SCALE_M
        quat = scene[..., OBJECT_QUAT] * torch.where(scene[..., OBJECT_QUAT][..., :1] < 0, -1.0, 1.0)
        height = (obj[..., 2:] - self.scene_mean[2]) / self.scene_std[2]
        features = torch.cat([height, rel,
                              rel[..., :2].norm(dim=-1, keepdim=True), quat, scene[..., HELD:TABLE_CONTACT + 1],
                              to_hands.flatten(-2), to_hands.norm(dim=-1).min(-1, keepdim=True).values], -1)
        return self.judge_head(torch.cat([features, self._task_like(task, q)], -1))

    def judge(self, latents: torch.Tensor, q: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        """Logits ``(..., 2)``: success and progress, for latents ``(..., D)`` and joints ``(..., J)``.
        With a scene expert, judged from the scene decoded from the latent (:meth:`judge_scene`)."""
        if self.has_scene_expert:
            return self.judge_scene(self.scene(latents, q, task), q, task)
        return self.judge_head(torch.cat([latents, q, self._task_like(task, latents)], -1))

    def _task_like(self, task: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Task embeddings of ``task (B,)`` broadcast over the middle dimensions of ``x (B, ..., F)``."""
        emb = self.task_embedding(task)
        return emb.view(*emb.shape[:1], *([1] * (x.dim() - 2)), -1).expand(*x.shape[:-1], -1)


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

    frames: torch.Tensor     # (B, L, V, 3, h, w) internal resolution
    state: torch.Tensor      # (B, L, J)
    success: torch.Tensor    # (B, L) probability
    progress: torch.Tensor   # (B, L) in [0, 1]
    latents: torch.Tensor    # (B, L, D) the latent each step's judgement came from
    judge_state: torch.Tensor  # (B, L, J) normalised joints that went with it
    scene: torch.Tensor | None  # (B, L, 12) the scene decoded from that latent (SCENE_STATE_NAMES); None: no expert


class Imagination:
    """Open-loop imagination of B episodes from their first observations, fed action chunks of any
    length. The latent advances in groups of k = frame_skip actions; a trailing partial group is
    predicted with its last action repeated, returned, and predicted again from the committed
    latent once its remaining actions arrive, so chunking never changes the full-group results.
    A control step's judgement is that of the latent which ends its group."""

    def __init__(self, net: WorldModelNet, first: torch.Tensor, task: torch.Tensor,
                 state: torch.Tensor | None = None, decode_batch: int = 64) -> None:
        """``first (B, V, 3, h, w)`` internal resolution; ``state (B, J)`` raw measured joints at the
        first frame, or None to estimate them from the images."""
        self.net = net
        self.first, self.task, self.decode_batch = first, task, decode_batch
        with torch.no_grad():
            features, self.skips = self.net.encode(first)
            self.q = self.net.state_from_image(features) if state is None else self.net.normalise_state(state)
            self.h = self.net.initial_latent(features, self.q, task)
            # The scene read from the first frame alone, before any action: where the model puts the objects.
            self.first_scene = self.net.scene(self.h, self.q, task) if self.net.has_scene_expert else None
        self.keyframe = first
        self.pending = first.new_zeros(first.shape[0], 0, self.net.config.joint_dim)

    @torch.no_grad()
    def advance(self, actions: torch.Tensor) -> Imagined:
        """Predict after each of ``actions (B, L, J)`` (raw targets)."""
        net, skip = self.net, self.net.config.frame_skip
        acts = torch.cat([self.pending, actions], 1)
        done, total = self.pending.shape[1], acts.shape[1]
        groups, full = -(-total // skip), total // skip
        padded = torch.cat([acts, acts[:, -1:].expand(-1, groups * skip - total, -1)], 1)
        latents, q = net.rollout(self.h, self.q, padded)
        batch = acts.shape[0]
        episode = torch.arange(batch).repeat_interleave(groups)
        flat = latents.flatten(0, 1)
        keys = torch.cat([net.decode(flat[i:i + self.decode_batch], episode[i:i + self.decode_batch],
                                     self.skips, self.first)
                          for i in range(0, len(flat), self.decode_batch)]).view(batch, groups, *self.first.shape[1:])
        previous = torch.cat([self.keyframe[:, None], keys[:, :-1]], 1)
        w = (torch.arange(1, skip + 1, dtype=keys.dtype) / skip).view(1, 1, skip, 1, 1, 1, 1)
        frames = (previous[:, :, None] * (1 - w) + keys[:, :, None] * w).flatten(1, 2)
        q_end = q.view(batch, groups, skip, -1)[:, :, -1]
        logits = net.judge(latents, q_end, self.task)

        def per_step(x: torch.Tensor) -> torch.Tensor:
            return x.repeat_interleave(skip, 1)[:, done:total]

        if full:
            self.h, self.q, self.keyframe = latents[:, full - 1], q[:, full * skip - 1], keys[:, full - 1]
        self.pending = acts[:, full * skip:]
        return Imagined(frames=frames[:, done:total], state=net.denormalise_state(q[:, done:total]),
                        success=per_step(torch.sigmoid(logits[..., 0])),
                        progress=per_step(torch.sigmoid(logits[..., 1])),
                        latents=per_step(latents), judge_state=per_step(q_end),
                        scene=per_step(net.scene(latents, q_end, self.task)) if net.has_scene_expert else None)



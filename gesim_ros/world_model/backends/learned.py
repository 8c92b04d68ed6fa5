"""``learned``: the embedded default world model, a small action-conditioned latent video model.

GE-Sim 2.0 shaped (first observation + action chunks in, multi-view frames, joint state and a judge
out) but sized to run faster than real time on a 2-core CPU. Everything runs at a reduced internal
resolution (48x64 per view by default); the caller's frames are resized in and out.

* encoder: one conv net shared by the views (a learned view embedding tells them apart) turns the
  first observation into a feature vector per view plus skip feature maps;
* dynamics: a GRU cell steps a latent through the actions ``frame_skip`` control steps at a time
  (3: 10 Hz latents for 30 Hz control). Its input is the k absolute targets, their offsets from the
  predicted joint positions, and those positions (proprioception);
* state expert: an MLP decoding from the latent the k joint positions (arm angles, gripper
  openings) of its control steps. They are fed back into the next step, so the rollout runs on the
  model's own proprioception, open loop, as it must once it replaces the robot;
* frame decoder: per view, upsamples the latent through the first observation's skip maps and
  blends its output with the first frame through a predicted mask, so the static scene is copied
  rather than re-generated; frames between latent steps are interpolated linearly;
* judge: an MLP on (latent, predicted joints, task embedding) giving success probability and
  progress. It is trained on the model's own open-loop imagined latents (not on encodings of real
  frames), so at run time it judges the episode the model imagined, as GE-Sim's world judge does.

Joint order inside the network and in checkpoints is the policy's ``[L7 arm, R7 arm, L grip, R
grip]`` (as in :class:`~gesim_ros.episodes.data.EpisodeRecord`); the :class:`LearnedWorldModel`
backend speaks GE-Sim's ``[L7 arm, L grip, R7 arm, R grip]`` like every other backend.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gesim_ros.contract.contract import DEFAULT_PROFILE, load_contract
from gesim_ros.world_model.api import (
    GESIM_VIEWS,
    ActionLayout,
    Judge,
    JudgeResult,
    StepResult,
    WorldModel,
    WorldModelInputError,
    check_array,
    validate_actions,
    validate_camera_params,
    validate_episode_traj,
    validate_first_frame,
)

_LOG = logging.getLogger(__name__)

BACKEND_NAME = "learned"
FORMAT = "gesim_ros.learned_world_model"  # the checkpoint format's name, kept when the module moved
FORMAT_VERSION = 1
UNKNOWN_TASK = "<unknown>"
DEFAULT_CHECKPOINT = Path(__file__).parents[1] / "models" / "learned_world_model.pt"
_REQUIRED_KEYS = ("format", "format_version", "model_config", "state_dict", "normalisation",
                  "task_vocabulary", "task_texts", "joint_names", "views", "control_period_s")


class CheckpointError(ValueError):
    """A checkpoint cannot be used: missing, corrupt, another format version, or made for other
    joints or views. The message names the file and what differs (expected versus found)."""


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

    def __post_init__(self) -> None:
        scale = 2 ** len(self.channels)
        if self.height % scale or self.width % scale or min(self.height, self.width) < scale:
            raise ValueError(f"model config: height and width must be positive multiples of {scale} "
                             f"(2 ** len(channels)), got {self.height}x{self.width}")
        for name in ("num_views", "joint_dim", "frame_skip", "view_dim", "latent_dim", "hidden_dim", "task_dim"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"model config: {name} must be >= 1, got {getattr(self, name)!r}")

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


def _mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                         nn.Linear(hidden, outputs))


class _Encoder(nn.Module):
    """Shared per-view conv net: features ``(B, V * view_dim)`` and skip maps for the decoder."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        widths = (3, *cfg.channels)
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 4, stride=2, padding=1) for a, b in zip(widths, widths[1:]))
        self.view_embedding = nn.Parameter(torch.zeros(cfg.num_views, cfg.channels[0]))
        scale = 2 ** len(cfg.channels)
        self.fc = nn.Linear(cfg.channels[-1] * (cfg.height // scale) * (cfg.width // scale), cfg.view_dim)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        batch, views = images.shape[:2]
        x = images.flatten(0, 1)
        skips = []
        for level, conv in enumerate(self.convs):
            x = conv(x)
            if level == 0:
                x = x + self.view_embedding.repeat(batch, 1)[:, :, None, None]
            x = F.silu(x)
            skips.append(x)
        return self.fc(x.flatten(1)).view(batch, -1), skips[:-1]


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

    def __init__(self, config: ModelConfig, num_tasks: int, normalisation: Normalisation) -> None:
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
        self.judge_head = _mlp(cfg.latent_dim + joints + cfg.task_dim, cfg.hidden_dim, 2)
        self.normalisation = normalisation
        for name in ("state_mean", "state_std", "action_mean", "action_std"):
            # Not in state_dict: the checkpoint stores them once, readable, under "normalisation".
            self.register_buffer(name, torch.from_numpy(getattr(normalisation, name)).clone(), persistent=False)

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

    def judge(self, latents: torch.Tensor, q: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        """Logits ``(..., 2)``: success and progress, for latents ``(..., D)`` and joints ``(..., J)``."""
        emb = self.task_embedding(task)
        emb = emb.view(*emb.shape[:1], *([1] * (latents.dim() - 2)), -1).expand(*latents.shape[:-1], -1)
        return self.judge_head(torch.cat([latents, q, emb], -1))


@dataclass
class LoadedModel:
    """A checkpoint's network and metadata."""

    net: WorldModelNet
    path: Path
    task_vocabulary: list[str]
    task_texts: dict[str, str]
    joint_names: list[str]
    views: list[str]
    control_period_s: float
    task_horizons: dict[str, int] = field(default_factory=dict)  # task -> steps of its training episodes
    _warned: set[str] = field(default_factory=set, repr=False)

    def task_id(self, task: str) -> int:
        """Vocabulary index of a task name or of an instruction seen in training; 0 (unknown) else."""
        if task in self.task_vocabulary:
            return self.task_vocabulary.index(task)
        if task in self.task_texts:
            return self.task_vocabulary.index(self.task_texts[task])
        if task and task not in self._warned:
            self._warned.add(task)
            _LOG.warning("task %r is neither a task name %s nor an instruction seen in training; "
                         "judging it as an unknown task", task, self.task_vocabulary[1:])
        return 0

    def task_horizon(self, task: str) -> int | None:
        """Steps of the longest training episode of ``task`` (a name or a seen instruction), if known."""
        return self.task_horizons.get(self.task_vocabulary[self.task_id(task)])


def _differences(what: str, expected: Sequence[str], found: Sequence[str]) -> str:
    expected, found = list(expected), list(found)
    if len(expected) != len(found):
        return f"{what} differ: expected {len(expected)} {expected}, found {len(found)} {found}"
    i = next(i for i, (a, b) in enumerate(zip(expected, found)) if a != b)
    return f"{what} differ at index {i}: expected {expected[i]!r}, found {found[i]!r} (expected {expected}, found {found})"


def save_checkpoint(path: str | os.PathLike, payload: Mapping[str, Any]) -> None:
    """Write atomically (temporary file in the same directory, fsync, rename): a crash or Ctrl-C
    mid-write leaves the previous checkpoint intact, never a truncated one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        torch.save(dict(payload), fh)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def read_checkpoint(path: str | os.PathLike) -> dict:
    """The raw checkpoint dict after format and version checks (no network built)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path}: no such file (train one with 'gesim-ros train-wm')")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for truncated or foreign files
        raise CheckpointError(f"checkpoint {path}: corrupt or not a torch file ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise CheckpointError(f"checkpoint {path}: not a learned world model checkpoint: "
                              f"format expected {FORMAT!r}, found {found!r}")
    if data.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path}: format version expected {FORMAT_VERSION}, "
                              f"found {data.get('format_version')!r}")
    missing = [k for k in _REQUIRED_KEYS if k not in data]
    if missing:
        raise CheckpointError(f"checkpoint {path}: corrupt: missing key(s) {missing}")
    return data


def load_checkpoint(path: str | os.PathLike, *, expected_joint_names: Sequence[str] | None = None,
                    expected_views: Sequence[str] | None = None) -> LoadedModel:
    """Load a checkpoint for inference; with ``expected_*`` it must match those joints and views."""
    path = Path(path)
    data = read_checkpoint(path)
    if expected_joint_names is not None and list(data["joint_names"]) != list(expected_joint_names):
        raise CheckpointError(f"checkpoint {path}: made for other joints: "
                              + _differences("joint names", expected_joint_names, data["joint_names"]))
    if expected_views is not None and list(data["views"]) != list(expected_views):
        raise CheckpointError(f"checkpoint {path}: made for other camera views: "
                              + _differences("views", expected_views, data["views"]))
    try:
        config = ModelConfig.from_dict(data["model_config"])
        if len(data["views"]) != config.num_views or len(data["joint_names"]) != config.joint_dim:
            raise ValueError(f"{len(data['views'])} views and {len(data['joint_names'])} joints listed, "
                             f"model built for {config.num_views} and {config.joint_dim}")
        vocabulary = [str(t) for t in data["task_vocabulary"]]
        if not vocabulary or vocabulary[0] != UNKNOWN_TASK:
            raise ValueError(f"task vocabulary must start with {UNKNOWN_TASK!r}, found {vocabulary[:1]}")
        net = WorldModelNet(config, len(vocabulary), Normalisation.from_dict(data["normalisation"], config.joint_dim))
        net.load_state_dict(data["state_dict"])
    except (ValueError, TypeError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"checkpoint {path}: corrupt: {exc}") from None
    net.eval()
    return LoadedModel(net=net, path=path, task_vocabulary=vocabulary, task_texts=dict(data["task_texts"]),
                       joint_names=list(data["joint_names"]), views=list(data["views"]),
                       control_period_s=float(data["control_period_s"]),
                       task_horizons={str(t): int(n) for t, n in data.get("task_horizons", {}).items()})


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
                        latents=per_step(latents), judge_state=per_step(q_end))


class LearnedWorldModel(WorldModel, Judge):
    """The ``learned`` backend: a trained :class:`WorldModelNet` behind the GE-Sim-shaped interface.

    Actions and state use GE-Sim's ``[L7 arm, L grip, R7 arm, R grip]`` layout (``self.layout``
    names the joints). Frames come back at the size of the first frame. The imagined latent is kept
    between ``step`` calls of an episode; ``judgement()`` gives the judge's per-step success
    probability and progress for the whole episode so far.
    """

    views = GESIM_VIEWS
    image_size = None  # any size: resized to the model's resolution and back

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
        result = StepResult(frames.reshape(*small.shape[:3], height, width), out.state[0][:, self._from_model].numpy())
        self._latents.append(out.latents[0])
        self._judge_states.append(out.judge_state[0])
        self._last_frame = result.frames[-1]
        return result

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

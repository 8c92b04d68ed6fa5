"""Training and evaluation of the ``learned`` world model (:mod:`gesim_ros.world_model.backends.learned`), on CPU.

``train`` fits the model to :class:`~gesim_ros.episodes.data.EpisodeRecord` s: every step rolls a
batch of whole episodes out open loop from their first observation with the recorded actions (the
way the model is used), and learns from that one imagined rollout

* state: MSE of the state expert's joints against the measured ones, every control step;
* scene: the scene expert's decoded scene (the task object's pose, held, table contact, the goal;
  ``SCENE_STATE_NAMES``) against the recorded ``scene_state`` at every latent step including the
  first (positions: MSE in units of their spread; quaternion: 1 - <q, q'>^2, blind to its sign;
  held and table contact: BCE), on the episodes that record it;
* hands: the hand expert's tool positions from the measured joints against the G2's forward
  kinematics of them (MSE), what the judge's object-to-hand offsets read;
* frames: L1 of decoded keyframes against the recorded frames (a few sampled keyframes per episode);
* judge: BCE of the success probability against the episode's outcome at every latent step (the
  final one weighted as much as all others together: it decides the episode), and MSE of progress
  against elapsed fraction, on successful episodes only (a failed episode's progress is unknown).
  The judge reads the scene decoded from the imagined latent and the decoded joints, detached: it
  learns what an imagined scene means and cannot shape the latent into a code for the outcome
  (which let format 1's judge read the scripted actions instead of the scene, issue #17). It also
  learns from the recorded scene states and joints (``recorded_judge_weight``), what an accurate
  imagination would show;
* the image-based estimate of the first joint state, used when a caller gives none.

Data order and sampling derive from (seed, step), so a run
resumed from its last checkpoint continues exactly as an uninterrupted one would.

Files beside ``out.pt``: ``out.train_state.pt`` (the same checkpoint plus optimiser state, for
resuming; written every ``checkpoint_every`` steps and on Ctrl-C) and ``out.losses.jsonl`` (one line
per ``log_every`` steps). Both checkpoints are written atomically.

``evaluate`` replays recorded actions open loop from the recorded first observation and state and
reports joint RMSE, PSNR and SSIM per horizon step and the judge's per-episode outcome agreement.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from gesim_ros.contract.contract import load_contract
from gesim_ros.episodes.data import SCENE_STATE_NAMES, VIEWS, EpisodeRecord
from gesim_ros.world_model.backends.learned_checkpoint import (
    FORMAT,
    FORMAT_VERSION,
    UNKNOWN_TASK,
    CheckpointError,
    read_checkpoint,
    save_checkpoint,
)
from gesim_ros.world_model.backends.learned_network import (
    ModelConfig,
    GOAL,
    HELD,
    OBJECT_POS,
    OBJECT_QUAT,
    TABLE_CONTACT,
    Normalisation,
    SceneNormalisation,
    WorldModelNet,
    resize_images,
)

_LOG = logging.getLogger(__name__)

__all__ = ["CheckpointError", "TrainConfig", "TrainProgress", "TrainResult", "ConsoleProgress", "train",
           "companion_paths", "training_summary"]


@dataclass(frozen=True)
class TrainConfig:
    """The training recipe. With these defaults (less the scene terms) the shipped format 1 checkpoint
    was trained: 655 episodes of 6-8 s, 1640 steps, ~45 min on one thread of a busy 2-core machine
    (~1.6 s a step; the scene expert and judge add little to a step)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    epochs: int = 40
    batch_size: int = 16
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    warmup_steps: int = 100
    image_samples: int = 4      # keyframes decoded per episode and step for the frame loss
    image_weight: float = 1.0
    state_weight: float = 1.0
    judge_weight: float = 0.5
    progress_weight: float = 0.1
    scene_weight: float = 1.0
    recorded_judge_weight: float = 0.5  # the judge on recorded scene states, beside the imagined ones
    task_dropout: float = 0.1   # share of episodes seen as the unknown task, so unseen instructions get a judge
    success_only: bool = False  # frames/state/scene from successful episodes only (the judge still sees all)
    checkpoint_every: int = 200
    log_every: int = 10
    seed: int = 0
    # One thread: on a shared 2-core machine a second torch thread mostly spins waiting for the
    # first (a training step measured 6x slower with 2 threads than with 1 under load).
    num_threads: int = 1

    def to_dict(self) -> dict:
        return {**asdict(self), "model": self.model.to_dict()}


@dataclass(frozen=True)
class TrainProgress:
    step: int              # steps done
    total_steps: int
    epoch: float
    losses: dict[str, float]  # running means since the last report
    elapsed_s: float       # this run's wall time (a resumed run starts at 0)
    eta_s: float


@dataclass(frozen=True)
class TrainResult:
    checkpoint: Path
    steps: int
    resumed_from: int
    wall_time_s: float     # all runs of this training together
    losses: dict[str, float]


class ConsoleProgress:
    """Progress line on stderr: step, losses, speed, ETA (redrawn in place on a terminal)."""

    def __init__(self, stream=None) -> None:
        self.stream = stream  # None: whatever sys.stderr is at call time

    def __call__(self, p: TrainProgress) -> None:
        stream = self.stream or sys.stderr
        tty = stream.isatty()
        losses = " ".join(f"{k} {v:.4f}" for k, v in p.losses.items())
        line = (f"step {p.step}/{p.total_steps} ({100 * p.step / p.total_steps:.0f}%) ep {p.epoch:.1f} | "
                f"{losses} | {_duration(p.elapsed_s)} elapsed, ETA {_duration(p.eta_s)}")
        end = "\n" if not tty or p.step == p.total_steps else ""
        stream.write(("\r\033[K" if tty else "") + line + end)
        stream.flush()


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def companion_paths(out_ckpt: str | os.PathLike) -> tuple[Path, Path]:
    """(resume state, loss log) written beside ``out_ckpt``."""
    out = Path(out_ckpt)
    return out.with_name(out.stem + ".train_state.pt"), out.with_name(out.stem + ".losses.jsonl")


# --------------------------------------------------------------------------- data


@dataclass
class _Episode:
    episode_id: str
    task: str
    success: bool
    actions: torch.Tensor      # (T, J)
    positions: torch.Tensor    # (T + 1, J)
    keyframes: torch.Tensor    # (T // k + 1, V, 3, h, w) uint8: frames 0, k, 2k, ...
    scene: torch.Tensor | None  # (T + 1, 12) recorded scene state, None where the record has none
    hands: torch.Tensor        # (T + 1, 2, 3) left and right tool positions (m) by forward kinematics

    @property
    def steps(self) -> int:
        return len(self.actions)


@dataclass
class _Dataset:
    episodes: list[_Episode]
    joint_names: list[str]
    task_texts: dict[str, str]
    control_period_s: float
    summary: dict


def _prepare(records: Iterable[EpisodeRecord], cfg: ModelConfig) -> _Dataset:
    """Keep what training reads, one record at a time: keyframes at the model's resolution only,
    so ~800 episodes fit in a couple of GB."""
    from gesim_ros.twin.kinematics import G2Kinematics  # MuJoCo: only training needs it

    skip = cfg.frame_skip
    episodes, texts, periods, sizes = [], {}, [], Counter()
    joint_names = None
    kinematics = G2Kinematics(load_contract(), VIEWS)
    for rec in records:
        if joint_names is None:
            joint_names = list(rec.joint_names)
        elif list(rec.joint_names) != joint_names:
            raise ValueError(f"episode {rec.episode_id}: joint names {rec.joint_names} differ from the "
                             f"first episode's {joint_names}; train on one robot layout at a time")
        missing = [v for v in VIEWS if v not in rec.frames]
        if missing:
            raise ValueError(f"episode {rec.episode_id}: no frames for view(s) {missing}; expected {list(VIEWS)}")
        if len(rec.joint_names) != cfg.joint_dim:
            raise ValueError(f"episode {rec.episode_id}: {len(rec.joint_names)} joints, model config expects {cfg.joint_dim}")
        frames = np.stack([resize_images(rec.frames[v][::skip], cfg.height, cfg.width) for v in VIEWS], 1)
        _, tools = kinematics.poses(np.stack([kinematics.complete(dict(zip(rec.joint_names, row)))
                                              for row in np.asarray(rec.joint_positions, np.float64)]))
        episodes.append(_Episode(rec.episode_id, rec.task, bool(rec.success),
                                 torch.from_numpy(np.asarray(rec.actions, np.float32)),
                                 torch.from_numpy(np.asarray(rec.joint_positions, np.float32)),
                                 torch.from_numpy(np.ascontiguousarray(frames.transpose(0, 1, 4, 2, 3))),
                                 None if rec.scene_state is None
                                 else torch.from_numpy(np.asarray(rec.scene_state, np.float32)),
                                 torch.from_numpy(tools[:, :, :3, 3].astype(np.float32))))
        texts.setdefault(rec.task_text, rec.task)
        periods.append(rec.control_period_s)
        sizes[rec.frames[VIEWS[0]].shape[1:3]] += 1
    if not episodes:
        raise ValueError("no episodes to train on")
    if all(e.scene is None for e in episodes):
        raise ValueError(f"none of the {len(episodes)} episodes records scene_state ({', '.join(SCENE_STATE_NAMES)}): "
                         "the scene expert and the judge learn from it; record twin episodes with "
                         "'gesim-ros record-training' (older records and collected rosbags have none)")
    tasks = Counter(e.task for e in episodes)
    summary = {
        "episodes": len(episodes),
        "control_steps": int(sum(e.steps for e in episodes)),
        "tasks": {t: {"episodes": n, "successes": sum(e.success for e in episodes if e.task == t)}
                  for t, n in sorted(tasks.items())},
        "frame_sizes": {f"{h}x{w}": n for (h, w), n in sizes.items()},
        "scene_state_episodes": sum(e.scene is not None for e in episodes),
        "episode_ids": sorted(e.episode_id for e in episodes),
    }
    return _Dataset(episodes, joint_names, texts, float(median(periods)), summary)


@dataclass
class _Batch:
    first: torch.Tensor        # (B, V, 3, h, w) float
    q0: torch.Tensor           # (B, J) raw
    actions: torch.Tensor      # (B, G * k, J) raw, each episode padded with its last action
    targets: torch.Tensor      # (B, G * k, J) raw measured joints after each action
    step_mask: torch.Tensor    # (B, G * k) real control steps
    group_mask: torch.Tensor   # (B, G) latent steps that hold at least one real action
    last_group: torch.Tensor   # (B,)
    progress: torch.Tensor     # (B, G) elapsed fraction at the end of each latent step
    success: torch.Tensor      # (B,) float
    task: torch.Tensor         # (B,)
    scene: torch.Tensor        # (B, G + 1, 12) recorded scene state at latent steps (0: the first frame)
    scene_mask: torch.Tensor   # (B, G + 1) where that is recorded and real
    hand_q: torch.Tensor       # (B, G + 1, J) raw measured joints at latent steps
    hands: torch.Tensor        # (B, G + 1, 2, 3) and the tool positions for them
    image_episode: torch.Tensor  # (N,) sampled keyframes: episode, latent step, target
    image_group: torch.Tensor
    image_target: torch.Tensor   # (N, V, 3, h, w) float


def _make_batch(episodes: list[_Episode], vocabulary: list[str], cfg: TrainConfig, gen: torch.Generator) -> _Batch:
    skip = cfg.model.frame_skip
    groups = max(-(-e.steps // skip) for e in episodes)
    length = groups * skip
    actions, targets, masks, img_e, img_g, img_t, scenes, hand_q, hands = [], [], [], [], [], [], [], [], []
    for i, e in enumerate(episodes):
        pad = length - e.steps
        actions.append(torch.cat([e.actions, e.actions[-1:].expand(pad, -1)]))
        targets.append(torch.cat([e.positions[1:], e.positions[-1:].expand(pad, -1)]))
        masks.append(torch.arange(length) < e.steps)
        at = (torch.arange(groups + 1) * skip).clamp(max=e.steps)  # latent step g ends at frame (g + 1) k
        scenes.append(torch.zeros(groups + 1, len(SCENE_STATE_NAMES)) if e.scene is None else e.scene[at])
        hand_q.append(e.positions[at])
        hands.append(e.hands[at])
        full = e.steps // skip  # keyframe j (j >= 1) is the frame after latent step j - 1
        if full:
            picks = torch.randint(1, full + 1, (min(cfg.image_samples, full),), generator=gen)
            img_e += [i] * len(picks)
            img_g += (picks - 1).tolist()
            img_t.append(e.keyframes[picks])
    steps = torch.tensor([e.steps for e in episodes])
    g = torch.arange(groups)
    task = torch.tensor([vocabulary.index(e.task) for e in episodes])
    task = torch.where(torch.rand(len(episodes), generator=gen) < cfg.task_dropout, torch.zeros_like(task), task)
    group_mask = g[None] < -(-steps[:, None] // skip)
    has_scene = torch.tensor([e.scene is not None for e in episodes])
    return _Batch(
        first=torch.stack([e.keyframes[0] for e in episodes]).float() / 255,
        q0=torch.stack([e.positions[0] for e in episodes]),
        actions=torch.stack(actions), targets=torch.stack(targets), step_mask=torch.stack(masks),
        group_mask=group_mask, last_group=-(-steps // skip) - 1,
        progress=((g[None] + 1) * skip / steps[:, None]).clamp(max=1.0),
        success=torch.tensor([float(e.success) for e in episodes]), task=task,
        scene=torch.stack(scenes), scene_mask=has_scene[:, None] & torch.cat([torch.ones(len(episodes), 1, dtype=torch.bool),
                                                                               group_mask], 1),
        hand_q=torch.stack(hand_q), hands=torch.stack(hands),
        image_episode=torch.tensor(img_e, dtype=torch.long), image_group=torch.tensor(img_g, dtype=torch.long),
        image_target=torch.cat(img_t).float() / 255 if img_t else torch.zeros(0))


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def _scene_loss(net: WorldModelNet, raw: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scene expert output ``raw (B, G + 1, 12)`` against recorded ``target`` where ``mask``; the first
    frame's scene weighs as much as all later ones together: the object is where the first frame
    shows it until the robot moves it (a constant guess was measured where it weighed 1 / (G + 1))."""
    def pos(x: torch.Tensor) -> torch.Tensor:  # object and goal positions, in the order scene_mean has them
        return torch.cat([x[..., OBJECT_POS], x[..., GOAL]], -1)

    pos_err = ((pos(raw) - (pos(target) - net.scene_mean) / net.scene_std) ** 2).mean(-1)
    quat_err = 1 - (F.normalize(raw[..., OBJECT_QUAT], dim=-1) * F.normalize(target[..., OBJECT_QUAT], dim=-1)).sum(-1) ** 2
    flags = slice(HELD, TABLE_CONTACT + 1)
    flag_err = F.binary_cross_entropy_with_logits(raw[..., flags], target[..., flags], reduction="none").mean(-1)
    err = pos_err + quat_err + flag_err
    return 0.5 * _masked_mean(err[:, 0], mask[:, 0]) + 0.5 * _masked_mean(err[:, 1:], mask[:, 1:])


_HAND_SCALE_M = 0.05  # hand-position errors in units of 5 cm, the scale of the judge's offsets


def _judge_bce(logits: torch.Tensor, b: _Batch) -> torch.Tensor:
    """Per-episode BCE of the success logit at every latent step against the outcome (``(B,)``)."""
    bce = F.binary_cross_entropy_with_logits(logits[..., 0], b.success[:, None].expand_as(logits[..., 0]),
                                             reduction="none")
    return 0.5 * bce[torch.arange(len(bce)), b.last_group] + 0.5 * (bce * b.group_mask).sum(1) / b.group_mask.sum(1)


def _losses(net: WorldModelNet, b: _Batch, cfg: TrainConfig) -> dict[str, torch.Tensor]:
    """One open-loop rollout per episode and every loss computed from it (see the module doc)."""
    recon = b.success if cfg.success_only else torch.ones_like(b.success)  # episodes that train frames/state
    features, skips = net.encode(b.first)
    q0 = net.normalise_state(b.q0)
    q0_loss = _masked_mean(F.mse_loss(net.state_from_image(features), q0, reduction="none").mean(1), recon > 0)
    h0 = net.initial_latent(features, q0, b.task)
    latents, q = net.rollout(h0, q0, b.actions)
    state_err = F.mse_loss(q, net.normalise_state(b.targets), reduction="none").mean(2)
    state_loss = _masked_mean(state_err, b.step_mask & (recon[:, None] > 0))

    image_loss = torch.zeros(())
    if len(b.image_episode):
        keep = recon[b.image_episode] > 0
        if keep.any():
            e, g = b.image_episode[keep], b.image_group[keep]
            pred = net.decode(latents[e, g], e, skips, b.first)
            image_loss = F.l1_loss(pred, b.image_target[keep])

    skip = net.config.frame_skip
    q_end = q.view(q.shape[0], -1, skip, q.shape[-1])[:, :, -1]
    raw = net.scene_raw(torch.cat([h0[:, None], latents], 1), torch.cat([q0[:, None], q_end], 1), b.task)
    scene_loss = _scene_loss(net, raw, b.scene, b.scene_mask & (recon[:, None] > 0))

    # The judge reads the imagined scene and joints detached (see the module doc).
    q_end = q_end.detach()
    logits = net.judge_scene(net.scene_from_raw(raw[:, 1:].detach()), q_end, b.task)
    judge_loss = _judge_bce(logits, b).mean()
    progress_err = (torch.sigmoid(logits[..., 1]) - b.progress) ** 2
    progress_loss = _masked_mean(progress_err, b.group_mask & (b.success[:, None] > 0))
    hand_err = ((net.hands(net.normalise_state(b.hand_q)) - b.hands) / _HAND_SCALE_M) ** 2
    group_mask = torch.cat([torch.ones_like(b.group_mask[:, :1]), b.group_mask], 1)
    hand_loss = _masked_mean(hand_err.mean((-1, -2)), group_mask)
    recorded = b.scene_mask[:, 1:].any(1)
    q_rec = net.normalise_state(b.targets.view(*q_end.shape[:2], skip, -1)[:, :, -1])
    recorded_loss = _masked_mean(_judge_bce(net.judge_scene(b.scene[:, 1:], q_rec, b.task), b), recorded)

    total = (cfg.image_weight * image_loss + cfg.state_weight * (state_loss + q0_loss)
             + cfg.scene_weight * (scene_loss + hand_loss) + cfg.judge_weight * judge_loss
             + cfg.recorded_judge_weight * recorded_loss + cfg.progress_weight * progress_loss)
    return {"loss": total, "image": image_loss, "state": state_loss, "q0": q0_loss, "scene": scene_loss, "hands": hand_loss,
            "judge": judge_loss, "judge_recorded": recorded_loss, "progress": progress_loss}


# --------------------------------------------------------------------------- training


def _learning_rate(cfg: TrainConfig, step: int, total: int) -> float:
    """Linear warm-up, then cosine decay to a tenth."""
    warm = min(1.0, (step + 1) / max(1, cfg.warmup_steps))
    return cfg.learning_rate * warm * (0.1 + 0.45 * (1 + math.cos(math.pi * min(step, total) / max(1, total))))


def _payload(net: WorldModelNet, vocabulary: list[str], data: _Dataset, cfg: TrainConfig, step: int,
             total: int, wall_time_s: float) -> dict:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_config": net.config.to_dict(),
        "state_dict": net.state_dict(),
        "normalisation": net.normalisation.to_dict(),
        "scene_normalisation": net.scene_normalisation.to_dict(),
        "task_vocabulary": vocabulary,
        "task_texts": data.task_texts,
        "joint_names": data.joint_names,
        "views": list(VIEWS),
        "control_period_s": data.control_period_s,
        "task_horizons": {t: max(e.steps for e in data.episodes if e.task == t) for t in data.summary["tasks"]},
        "training": {
            "step": step, "total_steps": total, "wall_time_s": wall_time_s, "config": cfg.to_dict(),
            "data": data.summary, "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "torch": str(torch.__version__), "python": platform.python_version(),
        },
    }


def _resume_state(state_path: Path, data: _Dataset, cfg: TrainConfig) -> dict:
    state = read_checkpoint(state_path)
    if "optimizer" not in state:
        raise CheckpointError(f"checkpoint {state_path}: corrupt: no optimiser state to resume from")
    if state["model_config"] != cfg.model.to_dict():
        diff = {k: (v, state["model_config"].get(k)) for k, v in cfg.model.to_dict().items()
                if state["model_config"].get(k) != v}
        raise CheckpointError(f"checkpoint {state_path}: model config differs (key: expected, found): {diff}; "
                              "train from scratch (resume=False) or use the same config")
    if state["joint_names"] != data.joint_names:
        raise CheckpointError(f"checkpoint {state_path}: made for other joints: expected {data.joint_names}, "
                              f"found {state['joint_names']}")
    unknown = sorted({e.task for e in data.episodes} - set(state["task_vocabulary"]))
    if unknown:
        raise CheckpointError(f"checkpoint {state_path}: task vocabulary {state['task_vocabulary']} lacks "
                              f"task(s) {unknown} of the training data; train from scratch (resume=False)")
    return state


def train(records: Iterable[EpisodeRecord], out_ckpt: str | os.PathLike, config: TrainConfig | None = None,
          resume: bool = True, progress: Callable[[TrainProgress], None] | None = ConsoleProgress()) -> TrainResult:
    """Train on ``records`` and write the checkpoint ``out_ckpt`` (see the module doc).

    With ``resume`` and a resume state beside ``out_ckpt``, training continues from its step (same
    model config required; normalisation and task vocabulary are taken from the saved state).
    Ctrl-C saves the resume state before re-raising.
    """
    cfg = config or TrainConfig()
    if cfg.model.judge_input != "scene":
        raise ValueError(f"model config: judge_input {cfg.model.judge_input!r} is format 1's latent judge, which "
                         "can only be loaded; train-wm trains the scene judge (judge_input 'scene')")
    torch.set_num_threads(cfg.num_threads)
    out = Path(out_ckpt)
    out.parent.mkdir(parents=True, exist_ok=True)
    state_path, log_path = companion_paths(out)
    data = _prepare(records, cfg.model)
    episodes = data.episodes
    steps_per_epoch = -(-len(episodes) // cfg.batch_size)
    total = cfg.epochs * steps_per_epoch

    state = _resume_state(state_path, data, cfg) if resume and state_path.is_file() else None
    if state is None:
        torch.manual_seed(cfg.seed)
        vocabulary = [UNKNOWN_TASK, *sorted({e.task for e in episodes})]
        norm = Normalisation.fit(torch.cat([e.positions for e in episodes]).numpy(),
                                 torch.cat([e.actions for e in episodes]).numpy())
        scene_norm = SceneNormalisation.fit(torch.cat([e.scene for e in episodes if e.scene is not None]).numpy())
        start, wall_before = 0, 0.0
    else:
        if state["training"]["data"]["episode_ids"] != data.summary["episode_ids"]:
            _LOG.warning("resuming %s on other episodes than it was trained on so far (%d now, %d before)",
                         out, len(episodes), len(state["training"]["data"]["episode_ids"]))
        vocabulary = list(state["task_vocabulary"])
        norm = Normalisation.from_dict(state["normalisation"], cfg.model.joint_dim)
        scene_norm = SceneNormalisation.from_dict(state["scene_normalisation"])
        start, wall_before = int(state["training"]["step"]), float(state["training"]["wall_time_s"])
    net = WorldModelNet(cfg.model, len(vocabulary), norm, scene_norm)
    optimizer = torch.optim.AdamW(net.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    if state is not None:
        net.load_state_dict(state["state_dict"])
        optimizer.load_state_dict(state["optimizer"])
    _trim_log(log_path, start)
    net.train()

    t0 = time.monotonic()
    sums: Counter = Counter()
    reported = start
    step = start

    def save(with_model: bool) -> None:
        payload = _payload(net, vocabulary, data, cfg, step, total, wall_before + time.monotonic() - t0)
        save_checkpoint(state_path, {**payload, "optimizer": optimizer.state_dict()})
        if with_model:
            save_checkpoint(out, payload)

    try:
        with open(log_path, "a") as log:
            while step < total:
                epoch, position = divmod(step, steps_per_epoch)
                order = torch.randperm(len(episodes), generator=torch.Generator().manual_seed(cfg.seed * 100_003 + epoch))
                picked = [episodes[i] for i in order[position * cfg.batch_size:(position + 1) * cfg.batch_size]]
                gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
                batch = _make_batch(picked, vocabulary, cfg, gen)
                for group in optimizer.param_groups:
                    group["lr"] = _learning_rate(cfg, step, total)
                losses = _losses(net, batch, cfg)
                optimizer.zero_grad(set_to_none=True)
                losses["loss"].backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                optimizer.step()
                step += 1
                sums.update({k: float(v.detach()) for k, v in losses.items()})
                if step % cfg.log_every == 0 or step == total:
                    means = {k: v / (step - reported) for k, v in sums.items()}
                    elapsed = time.monotonic() - t0
                    log.write(json.dumps({"step": step, "epoch": round(step / steps_per_epoch, 3),
                                          "lr": optimizer.param_groups[0]["lr"],
                                          "wall_time_s": round(wall_before + elapsed, 2), **means}) + "\n")
                    log.flush()
                    if progress is not None:
                        progress(TrainProgress(step, total, step / steps_per_epoch, means, elapsed,
                                               elapsed / (step - start) * (total - step)))
                    sums.clear()
                    reported = step
                if step % cfg.checkpoint_every == 0 and step < total:
                    save(with_model=True)
    except KeyboardInterrupt:
        save(with_model=False)
        raise
    save(with_model=True)
    last = json.loads(log_path.read_text().splitlines()[-1]) if log_path.stat().st_size else {}
    return TrainResult(out, total, start, wall_before + time.monotonic() - t0,
                       {k: v for k, v in last.items() if k not in ("step", "epoch", "lr", "wall_time_s")})


def _trim_log(log_path: Path, step: int) -> None:
    """Drop log lines past ``step``: after an interruption they are re-run and logged again."""
    if not log_path.is_file():
        return
    lines = [ln for ln in log_path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
    log_path.write_text("".join(ln + "\n" for ln in lines))


def training_summary(ckpt: str | os.PathLike) -> Mapping[str, Any]:
    """The checkpoint's training record (step, wall time, config, data summary with episode ids)."""
    return read_checkpoint(ckpt).get("training", {})

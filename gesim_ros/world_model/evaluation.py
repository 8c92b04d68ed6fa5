"""`eval-wm`'s evaluation of a learned world model: each recorded episode replayed open loop from its
first frame and joint state, with joint error, image similarity per horizon step and the judge's
agreement with the recorded outcome."""


from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable

import numpy as np
import torch

from gesim_ros.comparator import image_metrics
from gesim_ros.comparator.metrics import summarize_agreement, summarize_agreement_by
from gesim_ros.episodes.data import VIEWS, EpisodeRecord
from gesim_ros.world_model.backends.learned_checkpoint import (
    CheckpointError,
    load_checkpoint,
)
from gesim_ros.world_model.backends.learned_network import (
    Imagination,
    resize_images,
)


class _PerStep:
    """Running sums of a per-horizon-step figure over episodes of different lengths."""

    def __init__(self) -> None:
        self.sums = np.zeros(0)
        self.counts = np.zeros(0)

    def add(self, values: np.ndarray, weight: float = 1.0) -> None:
        n = len(values)
        if n > len(self.sums):
            self.sums = np.pad(self.sums, (0, n - len(self.sums)))
            self.counts = np.pad(self.counts, (0, n - len(self.counts)))
        self.sums[:n] += values
        self.counts[:n] += weight

    def means(self) -> list[float]:
        return [float(x) for x in self.sums / np.maximum(self.counts, 1)]

    def overall(self) -> float:
        return float(self.sums.sum() / max(self.counts.sum(), 1))


def _psnr(mse: float) -> float:
    return 10 * math.log10(255.0 ** 2 / mse) if mse > 0 else math.inf


def evaluate(records: Iterable[EpisodeRecord], ckpt: str | os.PathLike, *, batch_size: int = 4,
             threshold: float = 0.5, num_threads: int = 1) -> dict:
    """Replay each record's actions open loop from its first frame and joint state; report joint
    RMSE (arm in rad, grippers in m), PSNR (dB) and SSIM per view, per horizon step (step h = after
    h actions), and the judge's agreement with the recorded outcome (judged success = the success
    probability after the last action >= ``threshold``), overall and per task.

    Images are compared as the ROS node publishes them: uint8, at the record's size. SSIM is
    :func:`gesim_ros.comparator.image_metrics.ssim` (the comparator's) averaged over frames; PSNR is that of
    the mean squared error over the episodes (per step, or over all frames for ``psnr_mean``),
    because an idle arm's wrist view is often predicted exactly, and an average of per-frame PSNR
    would then be infinite."""
    torch.set_num_threads(num_threads)
    t0 = time.monotonic()
    model = None
    arm, grip = _PerStep(), _PerStep()
    image = {v: (_PerStep(), _PerStep()) for v in VIEWS}
    judged: list[dict] = []
    batch: list[EpisodeRecord] = []

    def run(batch: list[EpisodeRecord]) -> None:
        cfg = model.net.config
        for rec in batch:
            if list(rec.joint_names) != model.joint_names:
                raise CheckpointError(f"checkpoint {model.path}: made for other joints than episode "
                                      f"{rec.episode_id}: expected {list(rec.joint_names)}, found {model.joint_names}")
        first = torch.stack([torch.from_numpy(resize_images(np.stack([r.frames[v][0] for v in VIEWS]), cfg.height, cfg.width))
                             for r in batch]).permute(0, 1, 4, 2, 3).float() / 255
        length = max(r.steps for r in batch)
        actions = torch.stack([torch.from_numpy(np.concatenate([r.actions, np.repeat(r.actions[-1:], length - r.steps, 0)]))
                               for r in batch]).float()
        task = torch.tensor([model.task_id(r.task) for r in batch])
        q0 = torch.stack([torch.from_numpy(np.asarray(r.joint_positions[0], np.float32)) for r in batch])
        out = Imagination(model.net, first, task, q0).advance(actions)
        gripper = np.array(["gripper" in n for n in model.joint_names])
        for i, rec in enumerate(batch):
            steps = rec.steps
            err = (out.state[i, :steps].numpy() - rec.joint_positions[1:]) ** 2
            arm.add(err[:, ~gripper].mean(1))
            grip.add(err[:, gripper].mean(1))
            for v, view in enumerate(VIEWS):
                truth = rec.frames[view][1:]
                pred = out.frames[i, :steps, v].clamp(0.0, 1.0).permute(0, 2, 3, 1).numpy()
                pred = resize_images(pred, *truth.shape[1:3])
                pred = np.round(pred * 255).astype(np.uint8)  # what the ROS node publishes
                image[view][0].add(((pred.astype(np.float32) - truth) ** 2).reshape(steps, -1).mean(1))
                image[view][1].add(np.array([image_metrics.ssim(p, t) for p, t in zip(pred, truth)]))
            p = float(out.success[i, steps - 1])
            judged.append({"episode_id": rec.episode_id, "task": rec.task, "label": rec.label,
                           "real_success": bool(rec.success), "success_prob": round(p, 4),
                           "model_success": p >= threshold})

    for rec in records:
        if model is None:
            model = load_checkpoint(ckpt, expected_views=VIEWS)
        batch.append(rec)
        if len(batch) == batch_size:
            run(batch)
            batch = []
    if batch:
        run(batch)
    if model is None:
        raise ValueError("no episodes to evaluate")
    real = [j["real_success"] for j in judged]
    pred = [j["model_success"] for j in judged]
    return {
        "checkpoint": str(ckpt),
        "episodes": len(judged),
        "control_period_s": model.control_period_s,
        "horizon_steps": len(arm.sums),
        "episodes_per_step": [int(c) for c in arm.counts],
        "joint_rmse": {"arm": [math.sqrt(x) for x in arm.means()], "gripper": [math.sqrt(x) for x in grip.means()],
                       "arm_overall": math.sqrt(arm.overall()), "gripper_overall": math.sqrt(grip.overall()),
                       "units": {"arm": "rad", "gripper": "m"}},
        "image": {v: {"psnr": [_psnr(x) for x in mse.means()], "ssim": s.means(), "psnr_mean": _psnr(mse.overall()),
                      "ssim_mean": s.overall()}
                  for v, (mse, s) in image.items()},
        "judge": {"threshold": threshold,
                  "overall": summarize_agreement(real, pred).to_dict(),
                  "per_task": {t: s.to_dict() for t, s in
                               summarize_agreement_by([j["task"] for j in judged], real, pred).items()},
                  "episodes": judged},
        "seconds": round(time.monotonic() - t0, 2),
    }

"""`eval-wm`'s evaluation of a learned world model: each recorded episode started exactly as the
world-model node starts it (:class:`~gesim_ros.world_model.session.EpisodeStart`: the sync's first
frame prepared at the model size from the camera images, the task text, the measured joint state)
and stepped through the backend with the recorded actions, chunk by chunk as the node steps it; joint
error, image similarity per horizon step, the imagined scene's error and the judge's agreement with
the recorded outcome."""


from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable

import numpy as np
import torch

from gesim_ros.comparator import image_metrics
from gesim_ros.comparator.metrics import summarize_agreement, summarize_agreement_by
from gesim_ros.contract.contract import DEFAULT_PROFILE, load_contract
from gesim_ros.episodes.data import SCENE_STATE_NAMES, VIEWS, EpisodeRecord
from gesim_ros.world_model.backends.learned import LearnedWorldModel
from gesim_ros.world_model.backends.learned_dynamics import yaw_from_quat
from gesim_ros.world_model.backends.learned_checkpoint import CheckpointError
from gesim_ros.world_model.backends.learned_network import GOAL, HELD, OBJECT_HALF, OBJECT_POS, OBJECT_QUAT, TABLE_CONTACT, resize_images
from gesim_ros.world_model.layouts import step_chunked
from gesim_ros.world_model.session import EpisodeStart, Observation, SessionSettings


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


def _quarter_turn_degrees(angle: float) -> float:
    """``angle`` (rad) modulo a quarter turn, as degrees from 0 in [0, 45]: what the model can tell of
    a yaw (the task objects look the same turned by 90 degrees)."""
    return abs((4 * angle + math.pi) % (2 * math.pi) - math.pi) / 4 * 180 / math.pi


def _tilt_degrees(quat: np.ndarray) -> float:
    """Angle between the object's z axis and the world's (degrees), as the twin's checker measures it."""
    _, x, y, _ = quat
    return round(math.degrees(math.acos(float(np.clip(1 - 2 * (x * x + y * y), -1.0, 1.0)))), 2)


def _first_step(flags: np.ndarray) -> int | None:
    """The first horizon step (1 = after the first action) where ``flags`` holds, or None."""
    hits = np.flatnonzero(flags)
    return int(hits[0]) + 1 if len(hits) else None


def _tipped_at_step(quats: np.ndarray) -> int | None:
    """When the object first tilts past the checker's knocked-over limit (45 degrees)."""
    return _first_step(np.array([_tilt_degrees(q) >= 45 for q in quats]))


def _moved_at_step(start: np.ndarray, positions: np.ndarray) -> int | None:
    """When the object is first 5 mm from where it started: the first contact that shifts it."""
    return _first_step(np.linalg.norm(positions - start, axis=1) >= 0.005)


def _yaw_turn_degrees(first: np.ndarray, last: np.ndarray) -> float:
    """How far the object turned about world z from ``first`` to ``last`` (degrees, in [-180, 180))."""
    yaws = yaw_from_quat(torch.from_numpy(np.stack([first, last]).astype(np.float64)))
    return round((math.degrees(float(yaws[1] - yaws[0])) + 180) % 360 - 180, 2)


def _observation(rec: EpisodeRecord, camera_for_view: dict[str, str]) -> Observation:
    """The sync observation of ``rec``: its first frame per camera and its first measured joints."""
    return Observation(rec.episode_id, rec.task, rec.task_text, rec.seed,
                       {camera_for_view[v]: rec.frames[v][0] for v in VIEWS},
                       dict(zip(rec.joint_names, map(float, rec.joint_positions[0]))))


def evaluate(records: Iterable[EpisodeRecord], ckpt: str | os.PathLike, *, chunk_steps: int | None = None,
             threshold: float = 0.5, num_threads: int = 1, contract_profile: str = DEFAULT_PROFILE) -> dict:
    """Play each record's actions open loop through the ``learned`` backend, started as the node
    starts an episode and fed ``chunk_steps`` actions a call (default: the backend's chunk size); report joint
    RMSE (arm in rad, grippers in m), PSNR (dB) and SSIM per view, per horizon step (step h = after
    h actions), and the judge's agreement with the recorded outcome (judged success = the success
    probability after the last action >= ``threshold``), overall and per task.

    Images are compared as the ROS node publishes them: uint8, at the record's size. SSIM is
    :func:`gesim_ros.comparator.image_metrics.ssim` (the comparator's) averaged over frames; PSNR is that of
    the mean squared error over the episodes (per step, or over all frames for ``psnr_mean``),
    because an idle arm's wrist view is often predicted exactly, and an average of per-frame PSNR
    would then be infinite."""
    t0 = time.monotonic()
    backend: LearnedWorldModel | None = None
    arm, grip, obj_err = _PerStep(), _PerStep(), _PerStep()
    first_obj_err: list[float] = []  # the object read from the first frame, before any action
    first_yaw_err: list[float] = []
    flags = {"held": [0, 0], "table_contact": [0, 0]}  # agreeing steps, steps
    image = {v: (_PerStep(), _PerStep()) for v in VIEWS}
    judged: list[dict] = []
    mode = SessionSettings().chunk_mode  # the node's default

    for rec in records:
        if backend is None:
            contract = load_contract(contract_profile)
            backend = LearnedWorldModel(checkpoint=str(ckpt), contract=contract_profile, num_threads=num_threads)
            start = EpisodeStart(backend, contract)
            camera_for_view = {t.view: t.key for t in contract.cameras if t.view}
            chunk = chunk_steps or backend.chunk_size
        missing = [n for n in backend.model.joint_names if n not in rec.joint_names]
        if missing:
            raise CheckpointError(f"checkpoint {ckpt}: made for other joints than episode {rec.episode_id}: "
                                  f"it lacks {missing} (has {list(rec.joint_names)})")
        obs = _observation(rec, camera_for_view)
        start.start(obs, start.first_frame(obs))
        targets = start.layout.gather(rec.joint_names, rec.actions)
        pieces = [step_chunked(lambda a: backend.step(start.grippers.to_command(a)), targets[i:i + chunk],
                               backend.chunk_size, mode, start.layout.gripper_dims)
                  for i in range(0, rec.steps, chunk)]
        state = start.grippers.from_state(np.concatenate([p.state for p in pieces]))
        frames = np.concatenate([p.frames for p in pieces])  # (T, 3, V, h, w) at the model size
        if len(frames) != rec.steps:
            raise ValueError(f"episode {rec.episode_id}: {len(frames)} predicted frames for {rec.steps} actions; "
                             "use --chunk-steps <= the backend's chunk_size so no chunk is compressed")
        state = state[:, [start.layout.names.index(n) for n in rec.joint_names]]  # back to the record's order
        gripper = np.array(["gripper" in n for n in rec.joint_names])
        err = (state - rec.joint_positions[1:]) ** 2
        arm.add(err[:, ~gripper].mean(1))
        grip.add(err[:, gripper].mean(1))
        for v, view in enumerate(VIEWS):
            truth = rec.frames[view][1:]
            pred = resize_images(frames[:, :, v].transpose(0, 2, 3, 1), *truth.shape[1:3])
            pred = np.round(np.clip(pred, 0.0, 1.0) * 255).astype(np.uint8)  # what the ROS node publishes
            image[view][0].add(((pred.astype(np.float32) - truth) ** 2).reshape(rec.steps, -1).mean(1))
            image[view][1].add(np.array([image_metrics.ssim(p, t) for p, t in zip(pred, truth)]))
        scene_row = {}
        if rec.scene_state is not None:
            scene, truth = backend.scene_state(), rec.scene_state[1:]
            obj_err.add(((scene[:, OBJECT_POS] - truth[:, OBJECT_POS]) ** 2).sum(1))
            first = backend.first_scene_state()
            first_obj_err.append(float(np.linalg.norm(first[OBJECT_POS] - rec.scene_state[0, OBJECT_POS])))
            yaws = yaw_from_quat(torch.from_numpy(np.stack([first[OBJECT_QUAT], rec.scene_state[0, OBJECT_QUAT]]).astype(np.float64)))
            first_yaw_err.append(_quarter_turn_degrees(float(yaws[0] - yaws[1])))
            for name, col in (("held", HELD), ("table_contact", TABLE_CONTACT)):
                flags[name][0] += int(((scene[:, col] >= 0.5) == (truth[:, col] >= 0.5)).sum())
                flags[name][1] += rec.steps
            scene_row = {"first_object_read": {"position_m": [round(float(x), 5) for x in first[OBJECT_POS]],
                                               "yaw_rad": round(float(yaws[0]), 5),
                                               "half_extents_m": [round(float(x), 5) for x in first[OBJECT_HALF]]},
                         "final_object_error_m": round(float(np.linalg.norm(scene[-1, OBJECT_POS] - truth[-1, OBJECT_POS])), 4),
                         "final_goal_error_m": round(float(np.linalg.norm(scene[-1, GOAL] - truth[-1, GOAL])), 4),
                         # how the object ends up turned: a pushed block turns about z; tipped, it lies on a side
                         "final_object_tilt_deg": {"real": _tilt_degrees(truth[-1, OBJECT_QUAT]),
                                                   "imagined": _tilt_degrees(scene[-1, OBJECT_QUAT])},
                         # when it happens: tipping that starts long after the first push is the
                         # rollout drifting, not the push
                         "object_moved_at_step": {"real": _moved_at_step(rec.scene_state[0, OBJECT_POS], truth[:, OBJECT_POS]),
                                                  "imagined": _moved_at_step(first[OBJECT_POS], scene[:, OBJECT_POS])},
                         "object_tipped_at_step": {"real": _tipped_at_step(truth[:, OBJECT_QUAT]),
                                                   "imagined": _tipped_at_step(scene[:, OBJECT_QUAT])},
                         "object_yaw_turn_deg": {
                             "real": _yaw_turn_degrees(rec.scene_state[0, OBJECT_QUAT], truth[-1, OBJECT_QUAT]),
                             "imagined": _yaw_turn_degrees(first[OBJECT_QUAT], scene[-1, OBJECT_QUAT])}}
        p = float(backend.judgement().success_prob[-1])  # the node's verdict: horizon-clamped as it is there
        judged.append({"episode_id": rec.episode_id, "task": rec.task, "label": rec.label,
                       "real_success": bool(rec.success), "success_prob": round(p, 4),
                       "model_success": p >= threshold, **scene_row})
    if backend is None:
        raise ValueError("no episodes to evaluate")
    real = [j["real_success"] for j in judged]
    pred = [j["model_success"] for j in judged]
    return {
        "checkpoint": str(ckpt),
        "episodes": len(judged),
        "control_period_s": backend.model.control_period_s,
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
        "scene": {"names": list(SCENE_STATE_NAMES), "steps": int(obj_err.counts.sum()),
                  "object_position_error_m": [math.sqrt(x) for x in obj_err.means()],
                  "object_position_error_m_overall": math.sqrt(obj_err.overall()) if obj_err.counts.sum() else None,
                  "first_frame_object_error_m_median": float(np.median(first_obj_err)) if first_obj_err else None,
                  "first_frame_object_yaw_error_deg_median": float(np.median(first_yaw_err)) if first_yaw_err else None,
                  **{f"{k}_accuracy": (a / n if n else None) for k, (a, n) in flags.items()}},
        "seconds": round(time.monotonic() - t0, 2),
    }

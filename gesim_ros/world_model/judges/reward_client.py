"""Any gesim_ros :class:`~gesim_ros.world_model.api.Judge` as a GE-Sim-V2 ``RewardClient``
(``evaluate(head_frames (T, H, W, 3) uint8, task) -> RewardResult(success, progress)``), e.g. for
``gesim.WorldModelEnv(..., reward=JudgeRewardClient(judge))``. serve-wm's ``/evaluate`` runs through it
too. The reward interface carries the head view only, so the judge must read only it (``judge_views``
``("head",)``, or None: then it gets the head as its single view)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gesim_ros.world_model.api import Judge, WorldModelInputError, check_array

HEAD_ONLY = ("head",)


@dataclass(frozen=True)
class RewardResult:
    """GE-Sim-V2's ``gesim.rewards.RewardResult``: per-frame ``success`` and ``progress``, (T,) float32."""

    success: np.ndarray
    progress: np.ndarray


class JudgeRewardClient:
    """GE-Sim-V2's ``RewardClient`` protocol over a gesim_ros judge (see the module doc)."""

    def __init__(self, judge: Judge):
        if judge.judge_views not in (None, HEAD_ONLY):
            raise WorldModelInputError(
                f"judge {type(judge).__name__} reads views {list(judge.judge_views)}; GE-Sim's reward interface "
                "carries only the head view. Fix: use a judge with judge_views ('head',)")
        self.judge = judge

    def evaluate(self, head_frames: np.ndarray, task: str) -> RewardResult:
        frames = np.asarray(head_frames)
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or not frames.shape[0]:
            raise WorldModelInputError(f"head_frames: {frames.dtype} array of shape {tuple(frames.shape)}; "
                                       "expected (T>=1, H, W, 3) uint8 RGB")
        # (T, H, W, 3) uint8 -> the judge's (T, 3, V=1, H, W) float in [0, 1]
        verdict = self.judge.judge(frames.transpose(0, 3, 1, 2)[:, :, None] / np.float32(255.0), None, task)
        spec = [("T", len(frames))]
        return RewardResult(check_array("success_prob", verdict.success_prob, spec, unit_range=True),
                            check_array("progress", verdict.progress, spec, unit_range=True))

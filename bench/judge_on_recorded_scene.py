"""Where a learned world model's wrong verdicts come from (issue #17): its judge read on the twin's
recorded scene, beside the same judge read on the imagined scene as the node runs it.

For each probe episode the verdict step is the node's (the last action, clamped to the task's horizon).
``imagined`` is ``eval-wm``'s verdict (the product path: imagined from the first frame and the measured
joints). ``recorded`` feeds the twin's recorded scene state and the grasp points of the measured joints after that
step into the same judge. If ``recorded`` agrees with the twin and ``imagined`` does not,
the imagination is what fails; if ``recorded`` fails too, the scene the judge reads cannot tell those
episodes apart, however well it is imagined.

    .venv/bin/python bench/judge_on_recorded_scene.py --probes data/probe_{scripted,graded,scene,noise} \\
        [--ckpt gesim_ros/world_model/models/learned_world_model.pt]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from ablation_world_model import _value  # this folder is on sys.path when a bench script runs
from gesim_ros.comparator.metrics import summarize_agreement
from gesim_ros.world_model import cli as wm_cli
from gesim_ros.world_model.backends.learned_checkpoint import DEFAULT_CHECKPOINT, LoadedModel, load_checkpoint
from gesim_ros.world_model.evaluation import evaluate


def recorded_verdicts(records, model: LoadedModel) -> dict[str, float]:
    """episode id -> the judge's success probability on the recorded scene at the node's verdict step."""
    net = model.net
    probs = {}
    for rec in records:
        if rec.scene_state is None:
            raise SystemExit(f"episode {rec.episode_id}: no recorded scene state; record probes with "
                             "'gesim-ros record-training --recipe probe-*'")
        step = rec.steps - 1
        horizon = model.task_horizon(rec.task)
        if horizon:
            step = min(step, horizon - 1)
        at = step + 1   # the scene after the verdict step's action
        order = [list(rec.joint_names).index(n) for n in model.joint_names]
        q = torch.from_numpy(np.asarray(rec.joint_positions[at], np.float32)[order])[None]
        scene = torch.from_numpy(np.asarray(rec.scene_state[at], np.float32))[None]
        with torch.no_grad():
            logits = net.judge_scene(scene, net.grasp_points(q), torch.tensor([model.task_id(rec.task)]),
                                     torch.tensor([at * model.control_period_s]))
        probs[rec.episode_id] = float(torch.sigmoid(logits[0, 0]))
    return probs


def _figures(real: list[bool], pred: list[bool]) -> str:
    s = summarize_agreement(real, pred).to_dict()
    return f"{_value(s['accuracy']):>5} / {_value(s['kappa']):>5} / {_value(s['optimism']):>5}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=Path, nargs="+", required=True, help="probe folders (record-training --recipe probe-*)")
    parser.add_argument("--ckpt", default=str(DEFAULT_CHECKPOINT), help="checkpoint (default: the shipped one)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default %(default)s)")
    args = parser.parse_args()
    for folder in args.probes:
        if not folder.is_dir():
            print(f"judge_on_recorded_scene: --probes {folder}: no such directory", file=sys.stderr)
            return 2
    torch.set_num_threads(args.threads)
    model = load_checkpoint(args.ckpt)
    print(f"{'probe':<16}{'n':>4}   imagined (agreement / kappa / P(S|F))   recorded scene (same)")
    for probe in args.probes:
        records = list(wm_cli.load_records(probe))  # read once for both judgements (60 episodes: ~130 MB)
        report = evaluate(records, args.ckpt, num_threads=args.threads)
        episodes = report["judge"]["episodes"]
        recorded = recorded_verdicts(records, model)
        real = [e["real_success"] for e in episodes]
        print(f"{probe.name:<16}{len(real):>4}   {_figures(real, [e['model_success'] for e in episodes]):<40}"
              f"{_figures(real, [recorded[e['episode_id']] >= report['judge']['threshold'] for e in episodes])}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

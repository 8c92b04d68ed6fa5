"""Command-line pieces for the learned world model: ``gesim-ros train-wm`` and ``gesim-ros eval-wm``.

``add_train_arguments``/``run_train`` and ``add_eval_arguments``/``run_eval`` follow the
``add_arguments(parser)``/``run(args) -> int`` shape of :mod:`gesim_ros.cli` subcommands.

Episodes come from :func:`load_records` only (npz records, recorded MCAP episodes, LeRobot datasets), so
a new source is added in one place. Training holds out a deterministic ~20 % of the episodes, chosen by a hash of the episode
id (so adding episodes never moves an old one across the split), unless ``--heldout-dir`` names a
separate evaluation set; it evaluates the held-out episodes when done. ``eval-wm`` skips episodes
the checkpoint was trained on (their ids are in the checkpoint) unless ``--include-training``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from gesim_ros.episodes.data import EpisodeRecord
from gesim_ros.world_model.backends.learned_network import ModelConfig
from gesim_ros.world_model.evaluation import evaluate
from gesim_ros.world_model.training import TrainConfig, companion_paths, train, training_summary

HELDOUT_FRACTION = 0.2


def load_records(data_dir: str | Path, image_size_hw: tuple[int, int] | None = None,
                 labels_csv: str | None = None) -> Iterator[EpisodeRecord]:
    """The episodes in ``data_dir``, loaded one at a time as they are consumed (a dataset of
    hundreds of multi-view episodes need not fit in memory): ``*.npz`` EpisodeRecords, the
    rosbag2/MCAP episode folders `gesim-ros collect` and shadow runs write, or a LeRobot v2.1/v3.0
    dataset (:func:`gesim_ros.episodes.lerobot.load_episodes`); recordings and datasets are sampled
    at ``image_size_hw`` (default: the size the model's scene reader reads); ``labels_csv`` gives plain
    ros2 bags their task and outcome. Raises
    ``FileNotFoundError`` at once for a missing or empty directory."""
    from gesim_ros.episodes.lerobot import load_episodes

    default = ModelConfig()
    return load_episodes(data_dir, image_size_hw=image_size_hw or (default.reader_height, default.reader_width),
                         labels_csv=labels_csv)


def is_heldout(episode_id: str, fraction: float = HELDOUT_FRACTION) -> bool:
    """Deterministic split by a hash of the id: the same episode always lands on the same side."""
    digest = hashlib.sha256(episode_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64 < fraction


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = TrainConfig()
    parser.add_argument("--data", required=True, metavar="DIR", help="episodes: a folder of *.npz EpisodeRecords or of recorded episode folders, or a LeRobot dataset")
    parser.add_argument("--labels", metavar="CSV", default=None,
                        help="episode_id,label[,task,task_text] (or episode_index,label for a LeRobot dataset): "
                             "outcomes and tasks the episodes do not carry, e.g. of plain ros2 bags")
    parser.add_argument("--out", required=True, metavar="CKPT", help="checkpoint to write (e.g. gesim_ros/world_model/models/learned_world_model.pt)")
    parser.add_argument("--epochs", type=int, default=defaults.epochs,
                        help="passes over the training episodes; each of the four stages (reader, dynamics, frames, "
                             "judge) runs a multiple of them (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="episodes per step (default %(default)s)")
    parser.add_argument("--judge-passes", type=float, default=defaults.judge_passes, metavar="N",
                        help="the judge stage's length, in multiples of --epochs (default %(default)s; the shipped "
                             "checkpoint's judge trained 3); a --resume needs the value the run started with")
    parser.add_argument("--success-only", action="store_true",
                        help="learn the scene reader, the dynamics and the frames from successful episodes only (as "
                             "world models trained on demonstrations are); the judge still learns from all episodes")
    parser.add_argument("--image-size", metavar="HxW", default=f"{defaults.model.height}x{defaults.model.width}",
                        help="the imagined frames' resolution per view (default %(default)s)")
    retrain = parser.add_mutually_exclusive_group()
    retrain.add_argument("--judge-from", metavar="CKPT",
                         help="train only a new judge (its stage, minutes) for CKPT's scene reader, dynamics and frame "
                              "renderer, on --data, and write the result to --out; a format 5 or 6 CKPT first gets the "
                              "object refiner, trained alone as a full run trains it; also re-judges after outcomes "
                              "were relabelled")
    retrain.add_argument("--dynamics-from", metavar="CKPT",
                         help="train new dynamics and a new judge for CKPT's scene reader and frame renderer (about half "
                              "a full run's time; a format 5 or 6 CKPT first gets the object refiner, as with "
                              "--judge-from), on --data, and write the result to --out")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted training of CKPT from its last saved step")
    parser.add_argument("--heldout-dir", metavar="DIR",
                        help="evaluate on the episodes in DIR and train on all of --data (default: hold out "
                             f"~{HELDOUT_FRACTION:.0%}% of --data by episode-id hash)")
    parser.add_argument("--heldout-fraction", type=float, default=HELDOUT_FRACTION,
                        help="share of --data held out when there is no --heldout-dir (default %(default)s)")
    parser.add_argument("--threads", type=int, default=defaults.num_threads, help="torch CPU threads (default %(default)s)")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="initialisation and data-order seed (default %(default)s)")


def run_train(args: argparse.Namespace) -> int:
    out = Path(args.out)
    state_path, log_path = companion_paths(out)
    if not args.resume and (out.exists() or state_path.exists()):
        print(f"train-wm: {out} already exists; pass --resume to continue its training, or remove it "
              f"and {state_path.name}", file=sys.stderr)
        return 2
    if not 0.0 <= args.heldout_fraction < 1.0:
        print(f"train-wm: --heldout-fraction must be in [0, 1), got {args.heldout_fraction}", file=sys.stderr)
        return 2
    if not 0 < args.judge_passes < math.inf:
        print(f"train-wm: --judge-passes must be a positive number of passes, got {args.judge_passes}", file=sys.stderr)
        return 2
    try:
        height, width = (int(x) for x in args.image_size.lower().split("x"))
        model = ModelConfig(height=height, width=width)
        size = (model.reader_height, model.reader_width)   # recordings and datasets at what the reader reads
    except ValueError as exc:
        print(f"train-wm: --image-size {args.image_size!r}: expected HxW, e.g. 48x64 ({exc})", file=sys.stderr)
        return 2
    config = TrainConfig(model=model, epochs=args.epochs, batch_size=args.batch_size, success_only=args.success_only,
                         judge_passes=args.judge_passes, num_threads=args.threads, seed=args.seed)

    def split(heldout: bool) -> Iterator[EpisodeRecord]:
        if args.heldout_dir:
            return (load_records(args.heldout_dir, size, args.labels) if heldout
                    else load_records(args.data, size, args.labels))
        return (r for r in load_records(args.data, size, args.labels) if is_heldout(r.episode_id, args.heldout_fraction) == heldout)

    try:
        result = train(split(heldout=False), out, config, resume=args.resume, judge_from=args.judge_from,
                       dynamics_from=args.dynamics_from)
    except (FileNotFoundError, ValueError) as exc:  # CheckpointError is a ValueError
        print(f"train-wm: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        saved = (f"progress saved in {state_path}, continue with --resume" if state_path.is_file()
                 else "nothing saved yet, run it again")
        print(f"\ntrain-wm: interrupted; {saved}", file=sys.stderr)
        return 130
    took = f"{result.run_time_s / 60:.1f} min"
    retrained_from = args.judge_from or args.dynamics_from
    if retrained_from and not args.resume:   # its steps start after the stages it keeps
        kept = "scene reader, dynamics and frame renderer" if args.judge_from else "scene reader and frame renderer"
        took += f" ({result.wall_time_s / 60:.1f} min with {retrained_from}'s training, whose {kept} it keeps)"
    elif result.resumed_from:
        took += f" (resumed at step {result.resumed_from}; {result.wall_time_s / 60:.1f} min in all)"
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {result.steps} steps, {took}; "
          f"losses logged to {log_path}")
    try:
        report = evaluate(split(heldout=True), out, num_threads=args.threads)
    except ValueError as exc:
        print(f"no held-out evaluation: {exc}")
        return 0
    report_path = out.with_name(out.stem + ".eval.json")
    report_path.write_text(json.dumps(report, indent=1))
    print(format_evaluation(report))
    print(f"full evaluation: {report_path}")
    return 0


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, metavar="DIR", help="episodes: a folder of *.npz EpisodeRecords or of recorded episode folders, or a LeRobot dataset")
    parser.add_argument("--labels", metavar="CSV", default=None,
                        help="episode_id,label[,task,task_text] (or episode_index,label for a LeRobot dataset): "
                             "outcomes and tasks the episodes do not carry, e.g. of plain ros2 bags")
    parser.add_argument("--ckpt", required=True, metavar="CKPT", help="learned world model checkpoint")
    parser.add_argument("--json", metavar="OUT", help="also write the full figures (every horizon step, every episode) as JSON")
    parser.add_argument("--include-training", action="store_true",
                        help="also evaluate episodes the checkpoint was trained on (skipped by default)")
    parser.add_argument("--chunk-steps", type=int, metavar="N",
                        help="actions per backend step, as a policy's chunks reach the node (default: the "
                             "backend's chunk_size)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default %(default)s)")


def run_eval(args: argparse.Namespace) -> int:
    try:
        trained = set(training_summary(args.ckpt).get("data", {}).get("episode_ids", []))
        skipped = []

        def unseen(records: Iterable[EpisodeRecord]) -> Iterator[EpisodeRecord]:
            for rec in records:
                if rec.episode_id in trained and not args.include_training:
                    skipped.append(rec.episode_id)
                else:
                    yield rec

        if args.chunk_steps is not None and args.chunk_steps < 1:
            raise ValueError(f"--chunk-steps must be >= 1, got {args.chunk_steps}")
        report = evaluate(unseen(load_records(args.data, labels_csv=args.labels)), args.ckpt, chunk_steps=args.chunk_steps,
                          num_threads=args.threads)
    except (FileNotFoundError, ValueError) as exc:  # CheckpointError is a ValueError
        hint = " (all were training episodes; --include-training evaluates them)" if "no episodes" in str(exc) else ""
        print(f"eval-wm: {exc}{hint}", file=sys.stderr)
        return 2
    report["skipped_training_episodes"] = len(skipped)
    print(format_evaluation(report))
    if skipped:
        print(f"({len(skipped)} training episodes skipped; --include-training evaluates them too)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
        print(f"full evaluation: {args.json}")
    return 0


def _stat(stat: dict, digits: int = 2) -> str:
    if stat["value"] is None:
        return "n/a"
    ci = stat.get("ci95")
    return f"{stat['value']:.{digits}f}" + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else "")


def _table_steps(horizon: int) -> list[int]:
    marks = [1, 5, 10, 15, 30, 60, 90, 120, 150, 180, 240, 300, 450, 600, 900]
    return [s for s in marks if s < horizon] + [horizon]


def format_evaluation(report: dict) -> str:
    """A readable summary of an :func:`~gesim_ros.world_model.training.evaluate` report."""
    judge = report["judge"]
    hz = 1.0 / report["control_period_s"]
    lines = [f"learned world model {report['checkpoint']}: {report['episodes']} episodes, open loop from the first "
             "frame and measured joints, started and stepped as the node does",
             "",
             f"judge vs recorded outcome (success if P(success) >= {judge['threshold']} after the last action)",
             f"  {'task':<14}{'n':>5}  {'accuracy [95% CI]':<22}{'kappa':>7}  {'P(S|F)':>7}   "
             "confusion real S->model S/F, real F->model S/F"]
    for name, s in [("all", judge["overall"]), *judge["per_task"].items()]:
        (ss, sf), (fs, ff) = s["confusion"]["counts"]
        kappa = "n/a" if s["kappa"]["value"] is None else f"{s['kappa']['value']:.2f}"
        optimism = "n/a" if s["optimism"]["value"] is None else f"{s['optimism']['value']:.2f}"
        lines.append(f"  {name:<14}{s['n']:>5}  {_stat(s['accuracy']):<22}{kappa:>7}  {optimism:>7}   {ss}/{sf}, {fs}/{ff}")
    scene = report["scene"]
    if scene["steps"]:
        lines += ["", f"imagined scene vs recorded ({scene['steps']} steps): object position error "
                      f"{100 * scene['object_position_error_m_overall']:.1f} cm (from the first frame alone "
                      f"{100 * scene['first_frame_object_error_m_median']:.1f} cm and "
                      f"{scene['first_frame_object_yaw_error_deg_median']:.1f} degrees of yaw median, last step "
                      f"{100 * scene['object_position_error_m'][-1]:.1f} cm), held {scene['held_accuracy']:.2f}, "
                      f"table contact {scene['table_contact_accuracy']:.2f} of steps right"]
    rmse, image = report["joint_rmse"], report["image"]
    views = list(image)
    lines += ["", "open-loop error by horizon (step h = after h actions)",
              f"  {'step':>5} {'time':>7} {'eps':>5} {'arm rad':>8} {'grip mm':>8}   "
              + "  ".join(f"{'PSNR/SSIM ' + v:>22}" for v in views)]
    for step in _table_steps(report["horizon_steps"]):
        i = step - 1
        cells = "  ".join(f"{image[v]['psnr'][i]:>14.1f} / {image[v]['ssim'][i]:.3f}" for v in views)
        lines.append(f"  {step:>5} {step / hz:>6.1f}s {report['episodes_per_step'][i]:>5} "
                     f"{rmse['arm'][i]:>8.3f} {1000 * rmse['gripper'][i]:>8.1f}   {cells}")
    cells = "  ".join(f"{image[v]['psnr_mean']:>14.1f} / {image[v]['ssim_mean']:.3f}" for v in views)
    lines.append(f"  {'all':>5} {'':>7} {'':>5} {rmse['arm_overall']:>8.3f} {1000 * rmse['gripper_overall']:>8.1f}   {cells}")
    return "\n".join(lines)

"""Ablation of the learned world model's training data (issue #17): three models, each evaluated on
the probes; what the judge learns depends on what it sees fail.

* ``success-only``: the rich-interaction set with ``train-wm --success-only``: frames, joints and the
  scene are learned from its successful episodes only (a world model trained on demonstrations);
  the judge still learns from every outcome, as it needs failures to learn at all;
* ``scripted``: the scripted-failure recipe (``record-training --recipe scripted``, the data of the
  format 1 model): failures are injected by the controller and show in its actions;
* ``rich``: the rich-interaction recipe (``record-training --recipe rich``): varied plans whose
  outcome follows from what happens in the scene.

Each model is trained by ``train-wm`` (its CLI path; all of the given data unless ``--heldout-fraction``) and
evaluated by ``eval-wm``'s evaluation on every probe folder (``record-training --recipe probe-*``):
agreement with the twin, Cohen's kappa and P(model success | real failure), with the confusion.
A checkpoint already in ``--out`` is reused (delete it to retrain). The table is printed and
written to ``--out/ablation.json``.

The run at a fifth of the shipped epochs (``--epochs 8``) and its table are in the README ("The
embedded learned world model"). A toy run, to try the script (figures mean little at this size):

    .venv/bin/gesim-ros record-training --recipe rich --episodes-per-task 20 --out data/rich_dev
    .venv/bin/gesim-ros record-training --recipe scripted --failure-rate 0.5 --episodes-per-task 20 \\
        --out data/scripted_dev
    for p in scripted graded scene noise; do .venv/bin/gesim-ros record-training --recipe probe-$p \\
        --episodes-per-task 5 --out data/probe_dev_$p; done
    .venv/bin/python bench/ablation_world_model.py --rich data/rich_dev --scripted data/scripted_dev \\
        --probes data/probe_dev_{scripted,graded,scene,noise} --out runs/ablation_dev --epochs 8
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gesim_ros.world_model import cli as wm_cli
from gesim_ros.world_model.evaluation import evaluate

VARIANTS = ("success-only", "scripted", "rich")


def train_variant(name: str, data: Path, out: Path, args: argparse.Namespace) -> Path:
    ckpt = out / f"{name}.pt"
    if ckpt.exists():
        print(f"{name}: reusing {ckpt}")
        return ckpt
    argv = ["--data", str(data), "--out", str(ckpt), "--epochs", str(args.epochs),
            "--heldout-fraction", str(args.heldout_fraction), "--threads", str(args.threads), "--image-size", args.image_size]
    if name == "success-only":
        argv.append("--success-only")
    parser = argparse.ArgumentParser()
    wm_cli.add_train_arguments(parser)
    print(f"{name}: train-wm {' '.join(argv)}", flush=True)
    if wm_cli.run_train(parser.parse_args(argv)) != 0:
        raise SystemExit(f"ablation: training {name} failed (see above)")
    return ckpt


def _value(stat: dict) -> str:
    return "n/a" if stat["value"] is None else f"{stat['value']:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rich", type=Path, required=True, help="rich-interaction training episodes")
    parser.add_argument("--scripted", type=Path, required=True, help="scripted-failure training episodes")
    parser.add_argument("--probes", type=Path, nargs="+", required=True, help="probe folders (one per kind)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the checkpoints and ablation.json")
    parser.add_argument("--epochs", type=int, default=40, help="train-wm --epochs (default %(default)s)")
    parser.add_argument("--heldout-fraction", type=float, default=0.0,
                        help="train-wm --heldout-fraction (default %(default)s: the probes are the held-out data; "
                             "0.2, train-wm's default, trains the rich variant exactly as the shipped recipe)")
    parser.add_argument("--image-size", default="48x64", help="train-wm --image-size (default %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default %(default)s)")
    args = parser.parse_args()
    for folder in [args.rich, args.scripted, *args.probes]:
        if not folder.is_dir():
            print(f"ablation: {folder}: no such directory", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    data = {"success-only": args.rich, "scripted": args.scripted, "rich": args.rich}
    results: dict[str, dict[str, dict]] = {}
    for name in VARIANTS:
        ckpt = train_variant(name, data[name], args.out, args)
        results[name] = {}
        for probe in args.probes:
            report = evaluate(wm_cli.load_records(probe), ckpt, num_threads=args.threads)
            results[name][probe.name] = {"overall": report["judge"]["overall"], "per_task": report["judge"]["per_task"],
                                         "scene": {k: v for k, v in report["scene"].items()
                                                   if not isinstance(v, list)}}
    (args.out / "ablation.json").write_text(json.dumps(results, indent=1))
    print(f"\n{'model':<14}{'probe':<22}{'n':>4}  {'agreement':>9}  {'kappa':>6}  {'P(S|F)':>6}   "
          "real S->model S/F, real F->model S/F   object error")
    for name, probes in results.items():
        for probe, r in probes.items():
            s = r["overall"]
            (ss, sf), (fs, ff) = s["confusion"]["counts"]
            err = r["scene"].get("object_position_error_m_overall")
            print(f"{name:<14}{probe:<22}{s['n']:>4}  {_value(s['accuracy']):>9}  {_value(s['kappa']):>6}  "
                  f"{_value(s['optimism']):>6}   {ss:>3}/{sf:<3}, {fs:>3}/{ff:<3}"
                  f"{'':22}{'n/a' if err is None else f'{100 * err:.1f} cm'}")
    print(f"figures: {args.out / 'ablation.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

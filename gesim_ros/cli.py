"""`gesim-ros`: the command-line front door. A subcommand is a module exposing
``add_arguments(parser)`` and ``run(args) -> int`` (or ``module:add_function:run_function`` where one
module serves several); modules are imported only when used."""

from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand -> (module, one-line help)
SUBCOMMANDS = {
    "shadow-run": ("gesim_ros.episodes.lab_run:add_shadow_arguments:run_shadow",
                   "the main job: a shadow-mode run on the twin with the agreement report"),
    "lab-run": ("gesim_ros.episodes.lab_run", "the lab-test graph in one mode (shadow, real, world_model) with the report"),
    "replay-shadow": ("gesim_ros.episodes.replay_shadow",
                      "shadow mode on recorded episodes (recordings, LeRobot, .npz): the agreement report, no robot"),
    "contract-demo": ("gesim_ros.tools.contract_demo", "publish the contract synthetically and show what a subscriber sees"),
    "serve-wm": ("gesim_ros.world_model.server", "serve a world-model backend over GE-Sim's HTTP wire protocol"),
    "report": ("gesim_ros.comparator.report_cli", "write the agreement report (HTML + JSON) of a comparator database"),
    "run-episodes": ("gesim_ros.episodes.run_cli", "run episodes (task x seed x backend mode) and record their outcomes"),
    "collect": ("gesim_ros.twin.collect", "record scripted twin episodes (rosbag2/MCAP) with ground-truth outcomes"),
    "record-training": ("gesim_ros.twin.training_data",
                        "record world-model training episodes (.npz) from the twin: the shipped model's data recipe"),
    "export-lerobot": ("gesim_ros.episodes.lerobot",
                       "recorded episodes (rosbag2/MCAP or .npz) as a LeRobot v3.0 dataset with an outcome label each"),
    "train-wm": ("gesim_ros.world_model.cli:add_train_arguments:run_train", "train the learned world model"),
    "eval-wm": ("gesim_ros.world_model.cli:add_eval_arguments:run_eval",
                "evaluate a learned world model open-loop on held-out episodes"),
    "rank-policies": ("gesim_ros.episodes.rank_policies",
                      "rank K policies on the real side and in the world model, with prediction-powered estimates"),
}


def build_parser(wanted=()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gesim-ros", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (target, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        module, add_name, run_name = (target.split(":") + ["add_arguments", "run"])[:3]
        p.set_defaults(_run=(module, run_name))
        if name in wanted:  # import only the subcommand being run (some pull in torch or MuJoCo)
            getattr(importlib.import_module(module), add_name)(p)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = [a for a in argv if a in SUBCOMMANDS][:1]
    args = build_parser(chosen or []).parse_args(argv)
    module, run_name = args._run
    return getattr(importlib.import_module(module), run_name)(args) or 0


if __name__ == "__main__":
    sys.exit(main())

"""`gesim-ros`: the command-line front door. Each subcommand lives in its own module, exposing
``add_arguments(parser)`` and ``run(args) -> int``; modules are imported only when used."""

from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand -> (module, one-line help)
SUBCOMMANDS = {
    "contract-demo": ("gesim_ros.contract_demo", "publish the contract synthetically and show what a subscriber sees"),
    "serve-wm": ("gesim_ros.world_model_server", "serve a world-model backend over GE-Sim's HTTP wire protocol"),
    "report": ("gesim_ros.report_cli", "write the agreement report (HTML + JSON) of a comparator database"),
    "run-episodes": ("gesim_ros.run_episodes", "run episodes (task x seed x backend mode) and record their outcomes"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gesim-ros", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(p)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return importlib.import_module(args._module).run(args) or 0


if __name__ == "__main__":
    sys.exit(main())

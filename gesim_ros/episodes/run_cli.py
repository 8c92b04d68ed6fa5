"""`gesim-ros run-episodes`: run the episode runner in this terminal, with one progress line per episode
and, with ``--label-outcomes``, a y/n prompt for each episode's outcome (a physical robot has no twin
to report it). Each ``--flag`` sets the `episode_runner` node parameter of the same name."""

from __future__ import annotations

from rclpy.parameter import Parameter

from gesim_ros.contract.contract import DEFAULT_PROFILE
from gesim_ros.episodes.plan import EpisodeResult, format_progress
from gesim_ros.episodes.runner import PARAMETERS, STOPPING_ERRORS, run_in_process
from gesim_ros.policy.api import Verdict

_ARRAY_ITEM = {Parameter.Type.STRING_ARRAY: str, Parameter.Type.INTEGER_ARRAY: int}


def add_arguments(parser) -> None:
    parser.add_argument("--contract", default=DEFAULT_PROFILE, help="contract profile or YAML path")
    for name, (default, description) in PARAMETERS.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true", default=None, help=description)
        elif isinstance(default, Parameter.Type):
            parser.add_argument(flag, nargs="+", type=_ARRAY_ITEM[default], default=None, help=description)
        elif isinstance(default, list):
            parser.add_argument(flag, nargs="+", default=None, help=f"{description} (default: {' '.join(default)})")
        else:
            parser.add_argument(flag, type=type(default), default=None,
                                help=f"{description} (default: {default!r})")
    parser.add_argument("--label-outcomes", action="store_true",
                        help="ask y/n for each ended episode's outcome (published as an operator OUTCOME)")


def ask_stdin(result: EpisodeResult) -> Verdict:
    """The operator's y/n for an ended episode, asked until the answer is one of them."""
    reported = f"{result.outcome_name} ({result.side}{', ' + result.label if result.label else ''})"
    while True:
        answer = input(f"episode {result.episode_id} {result.task} seed {result.seed} [{result.mode}] ended, "
                       f"reported {reported}. Success? [y/n] ").strip().lower()
        if answer in ("y", "n"):
            return Verdict(answer == "y", reason=f"labelled at the prompt (reported {reported})")


def run(args) -> int:
    overrides = [Parameter("contract", value=args.contract)]
    overrides += [Parameter(name, value=getattr(args, name)) for name in PARAMETERS
                  if getattr(args, name) is not None]

    def progress(index, total, result, results):
        print(format_progress(index, total, result, results), flush=True)

    try:
        results = run_in_process(overrides, progress, ask_stdin if args.label_outcomes else None, args=[])
    except STOPPING_ERRORS as exc:
        print(f"gesim-ros run-episodes: {exc}")
        return 2
    except KeyboardInterrupt:
        print("gesim-ros run-episodes: interrupted; the running episode was published as ABORTED")
        return 130
    aborted = sum(r.status == "aborted" for r in results)
    print(f"{len(results)} episode(s) run, {aborted} aborted")
    return 0

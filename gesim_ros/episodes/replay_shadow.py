"""`gesim-ros replay-shadow DATASET --out DIR`: shadow mode on recorded episodes, without the robot.

Starts the graph of launch/replay_shadow.launch.yaml as separate processes, exactly as `ros2 launch`
would: the replay node (``episode_replay``) as the robot and the policy, publishing each recorded
episode at its recorded timing; the backend switch in shadow mode, not armed, forwarding the
recorded commands to the world model as it forwards a policy's; the world model imagining each
episode from its recorded first frame and measured state; the comparator. The real side's outcome
is the recording's label (the recorded OUTCOME, a LeRobot episode's metadata, ``--labels CSV``) or,
with ``--label-outcomes``, the operator's y/n at this terminal after each episode. Prints a progress
line per episode, then the agreement summary, and writes the report into DIR as shadow-run does.

Bad input (a missing dataset, one the reader cannot use, an episode without a label, a bad
world-model option, a used DIR) is refused with one line and exit status 2 before any run folder is
made. A process of the graph that exits mid-run stops the replay; what was compared is reported and
the exit status is 1.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from gesim_ros.comparator.report import build_report, text_summary, write_report
from gesim_ros.comparator.store import EpisodeStore
from gesim_ros.episodes.lab_run import (EXIT_GRACE_S, GraphWatch, begin_run, judge_problem, server_problem,
                                        wait_for_comparator, world_model_config)
from gesim_ros.ros.launch_graph import load_launch, package_share
from gesim_ros.ros.process_harness import ProcessGroup

LAUNCH_FILE = "replay_shadow.launch.yaml"
REPLAY = "episode_replay"
#: what the replay node logs when an episode waits for the operator's label
AWAITS_LABEL = re.compile(r"episode (\S+) replayed: waiting for the operator's LABEL")


def add_arguments(parser) -> None:
    parser.add_argument("dataset", metavar="DATASET", type=Path,
                        help="recorded episodes: a shadow or real run folder (or its *_recordings), `gesim-ros "
                             "collect` folders, a LeRobot dataset, or a folder of *.npz EpisodeRecords")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: runs/replay-<time>)")
    parser.add_argument("--labels", default="", metavar="CSV",
                        help="outcome labels overriding the recorded ones: episode_id,label (episode_index,label "
                             "for a LeRobot dataset); 'success' is a success, any other label a failure")
    parser.add_argument("--label-outcomes", action="store_true",
                        help="ask y/n for each replayed episode's real outcome instead of using the recording's")
    parser.add_argument("--mapping", default="", metavar="NAME|YAML",
                        help="LeRobot feature mapping (a preset: g2a, gesim_ros; or a YAML file)")
    parser.add_argument("--chunk-horizon", type=int, default=10,
                        help="LeRobot and .npz episodes: actions per ActionChunk (default %(default)s)")
    for flag, default, text in (
            ("--world-model", "learned", "world-model backend (entry-point name)"),
            ("--world-model-server", "", "world-model server URL for --world-model gesim_http (as shadow-run's)"),
            ("--world-model-config", "{}", "the world-model backend's config as a JSON object"),
            ("--judge", "backend", "judge plugin (entry-point group gesim_ros.judges), as shadow-run's"),
            ("--judge-config", "{}", "the judge's config as a JSON object")):
        parser.add_argument(flag, default=default, help=f"{text} (default {default!r})")


def _problem(args, out: Path, database: Path) -> str:
    """What is wrong with the command line or the dataset, naming the fix, or ''."""
    from gesim_ros.contract.contract import load_contract
    from gesim_ros.episodes.replay import ReplayDataset
    from gesim_ros.episodes.replay_node import STOPPING_ERRORS

    args.mode = "shadow"  # what lab_run's world-model checks read
    config, problem = world_model_config(args)
    if problem or (problem := judge_problem(args)):
        return problem
    if database.exists():
        return f"--out {out} already holds a replay ({database.name}); give a new folder"
    try:
        dataset = ReplayDataset(args.dataset, load_contract(), args.labels, args.mapping, args.label_outcomes,
                                args.chunk_horizon)
    except STOPPING_ERRORS as exc:
        return str(exc)
    args.episode_count = len(dataset)
    args.skipped = dataset.skipped
    if "url" in config:  # last: the only check that may wait
        return server_problem("--world-model-server" if args.world_model_server else "--world-model-config's url",
                               config["url"])
    return ""


def run(args) -> int:
    name = "gesim-ros replay-shadow"
    out = (args.out or Path("runs") / time.strftime("replay-%Y%m%d-%H%M%S")).resolve()
    database = out / "replay_shadow.sqlite"
    domain = begin_run(name, out, _problem(args, out, database))
    if domain is None:
        return 2
    launch_file = package_share() / "launch" / LAUNCH_FILE
    nodes = load_launch(launch_file, {
        "dataset": str(args.dataset.resolve()), "labels_csv": str(Path(args.labels).resolve()) if args.labels else "",
        "lerobot_mapping": args.mapping, "label_outcomes": str(args.label_outcomes).lower(),
        "chunk_horizon": str(args.chunk_horizon), "database": str(database),
        "world_model_backend": args.world_model, "world_model_config": args.world_model_config,
        "world_model_server": args.world_model_server, "judge": args.judge, "judge_config": args.judge_config})
    print(f"replay of {args.episode_count} episode(s) of {args.dataset} in {out} (ROS_DOMAIN_ID={domain}, "
          "discovery on this machine only)")
    if args.skipped:
        print(f"left out: {len(args.skipped)} recording(s) of aborted episodes ({', '.join(map(str, args.skipped))})")
    print("starting " + ", ".join(n.executable for n in nodes) + f" from {LAUNCH_FILE} ...", flush=True)
    procs = ProcessGroup(out / "logs")
    started = time.monotonic()
    try:
        graph = {n.executable: procs.start(n.executable, *n.command()) for n in nodes}
        replay = graph.pop(REPLAY)
        peers = SimpleNamespace(processes=list(graph.values()))  # watched: the replay ends by itself
        stopped = _follow(replay, GraphWatch(peers), _OperatorPrompt() if args.label_outcomes else None)
        if replay.process.returncode == 2:  # it refused to start: its one line says why
            print(f"{name}: {replay.log().strip().splitlines()[-1]}", file=sys.stderr)
            return 2
        with EpisodeStore(database, readonly=True) as store:
            ids = {e.episode_id for e in store.episodes()} if database.is_file() else set()
        wait_for_comparator(database, ids, timeout_s=60.0, stop=lambda: stopped)
    finally:
        procs.stop_all()
    elapsed = time.monotonic() - started
    if not database.is_file():
        print(f"{name}: the comparator wrote no database; logs in {out / 'logs'}")
        return 1
    report = build_report(database)
    html_path, json_path = write_report(database, out / "report")
    print(f"\n{len(ids)} episode(s) replayed in {elapsed:.0f} s\n")
    print(text_summary(report))
    print(f"\nHTML report: {html_path}\nJSON figures: {json_path}\ndatabase: {database}\nlogs: {out / 'logs'}")
    if stopped:
        print(f"\nthe replay stopped early: {stopped}")
        return 1
    return 0


def _follow(replay, graph: GraphWatch, prompt: "_OperatorPrompt | None") -> str:
    """Echo the replay's progress lines until it exits; stop it when a peer has been gone
    EXIT_GRACE_S (returns why, else ''). With ``prompt``, ask the operator for each label."""
    shown = 0
    while True:
        lines = replay.log().splitlines()
        for line in lines[shown:]:
            if line.startswith("replay "):
                print(line, flush=True)
            elif prompt is not None and (m := AWAITS_LABEL.search(line)):
                prompt.ask(m.group(1))
        shown = len(lines)
        if not replay.running:
            return ""
        if reason := graph.interrupt():
            replay.stop()
            return f"{reason.replace('lab-run', 'replay-shadow')} (after {EXIT_GRACE_S:g} s)"
        time.sleep(0.25)


class _OperatorPrompt:
    """The operator's y/n for each replayed episode, sent to the replay node as EpisodeControl LABEL."""

    def __init__(self):
        import rclpy

        from gesim_ros.contract.contract import load_contract, message_class

        rclpy.init()
        self.rclpy = rclpy
        spec = load_contract().service("episode_control")
        self.Control = message_class(spec.type)
        self.node = rclpy.create_node("replay_shadow_operator")
        self.client = self.node.create_client(self.Control, spec.resolve("/"))

    def ask(self, episode_id: str) -> None:
        while True:
            answer = input(f"episode {episode_id} replayed. Success on the robot? [y/n] ").strip().lower()
            if answer in ("y", "n"):
                break
        request = self.Control.Request(command=self.Control.Request.LABEL, episode_id=episode_id,
                                       outcome=1 if answer == "y" else 2, note="labelled at the replay-shadow prompt")
        if not self.client.wait_for_service(timeout_sec=30):
            print(f"the label was not taken: nothing serves {self.client.srv_name}")
            return
        future = self.client.call_async(request)
        self.rclpy.spin_until_future_complete(self.node, future, timeout_sec=30)
        reply = future.result()
        if reply is None or not reply.accepted:
            print(f"the label was not taken: {reply.reason if reply else 'the replay node did not answer'}")

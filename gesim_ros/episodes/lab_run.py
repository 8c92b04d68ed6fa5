"""`gesim-ros lab-run --mode M`: the lab-test graph in one backend mode; `gesim-ros shadow-run`, the main
job, is lab-run in mode shadow.

Starts the graph of launch/lab_test.launch.yaml for the mode as separate processes, exactly as
`ros2 launch` would, runs N episodes with a progress line each, then prints the summary and writes the
HTML report:

* shadow: the MuJoCo twin as the robot, the backend switch in shadow mode, the learned world model
  imagining each episode, the scripted policy with its failure knob, the comparator;
* real: the twin as the robot under real_robot.launch.yaml (switch in mode real, armed), the policy and
  the comparator: the twin's own outcome is recorded;
* world_model: world_model_only.launch.yaml and the comparator, no twin. Each episode starts from the
  twin's start of its task and seed, recorded into the run folder first; the model ends it after the
  longest task's length (max_steps) and judges it.

The episode runner runs in this process with the parameters the launch file gives it (lab_test's
names the twin's reset). Its result per episode goes to ``episodes.json`` beside the database. When a
process of the graph exits mid-run (say the world model or the comparator is killed), lab-run notices
it at once: the episode it was in ends aborted (by the switch, which holds the robot, when the world
model is lost; else by the runner after EXIT_GRACE_S), no wait is sat out, and the run stops before the
next episode, keeps what was recorded, writes the report and exits with status 1.
"""

from __future__ import annotations

import http.client
import json
import sys
import time
import urllib.parse
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rclpy.parameter import Parameter

from gesim_ros.twin import tasks as twin_tasks
from gesim_ros.comparator.store import UNKNOWN, VERDICTS, EpisodeStore
from gesim_ros.contract.modes import EPISODE_MODES, SIDES_BY_MODE
from gesim_ros.ros.launch_graph import load_launch, package_share, param_file_names
from gesim_ros.comparator.report import build_report, text_summary, write_report
from gesim_ros.ros.process_harness import NoFreeDomainError, ProcessGroup, isolate_dds
from gesim_ros.plugins import PluginConfigError, load_entry_point, plugin_config
from gesim_ros.world_model.api import (ENTRY_POINT_GROUP, JUDGE_GROUP, Judge, WorldModel, available_judges,
                                      available_world_models)

TASKS = list(twin_tasks.TASKS)
#: How long a process of the graph is gone before the runner aborts the running episode itself: a lost
#: world model is the switch's to handle first (within its 1 s liveliness lease it holds the robot and
#: aborts with the cause and the fix).
EXIT_GRACE_S = 3.0
#: How long a world-model server has to answer GET /healthz before lab-run refuses to start.
SERVER_PROBE_S = 3.0
EXAMPLE_SERVER = "http://127.0.0.1:9000"
EXAMPLE_CONFIG = '{"timeout_s": 60}'
SERVE_HINT = "gesim-ros serve-wm --backend learned --port 9000"
EXAMPLE_JUDGE_CONFIG = '{"url": "http://127.0.0.1:9001"}'


def add_shadow_arguments(parser) -> None:
    parser.add_argument("--episodes", type=int, default=10, help="episodes to run (tasks interleave)")
    parser.add_argument("--tasks", nargs="+", default=TASKS, help="tasks to cycle through")
    parser.add_argument("--failure-rate", type=float, default=0.3,
                        help="the scripted policy's failure knob, so that both outcomes occur")
    parser.add_argument("--world-model", default="learned",
                        help="world-model backend (entry-point name; shadow and world_model modes)")
    parser.add_argument("--world-model-server", default="", metavar="URL",
                        help="address of a world-model server speaking GE-Sim 2.0's HTTP protocol, for "
                             f"--world-model gesim_http (e.g. {EXAMPLE_SERVER}; start one with `{SERVE_HINT}`); "
                             "it becomes the config's url and must answer GET /healthz before anything starts")
    parser.add_argument("--world-model-config", default="{}", metavar="JSON",
                        help=f"the world-model backend's config as a JSON object, e.g. '{EXAMPLE_CONFIG}' "
                             "(default %(default)s)")
    parser.add_argument("--judge", default="backend", metavar="NAME",
                        help="judge plugin (entry-point group gesim_ros.judges): backend (the world model's own, "
                             "none if it has none), none, gesim_reward_http (a reward model behind GE-Sim's reward "
                             "interface, e.g. `gesim-ros serve-wm ... --judge NAME`) or a lab's (default %(default)s)")
    parser.add_argument("--judge-config", default="{}", metavar="JSON",
                        help=f"the judge's config as a JSON object, e.g. '{EXAMPLE_JUDGE_CONFIG}' (default %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: runs/<mode>-<time>)")
    parser.add_argument("--episode-timeout", type=float, default=60.0, help="seconds before an episode times out")


def add_arguments(parser) -> None:
    parser.add_argument("--mode", choices=EPISODE_MODES, default="shadow",
                        help="shadow: twin and world model side by side; real: the twin alone; "
                             "world_model: the world model alone (default %(default)s)")
    add_shadow_arguments(parser)


def run_shadow(args) -> int:
    args.mode = "shadow"
    return run(args)


def _argument_problem(args, out: Path, database: Path) -> str:
    """What is wrong with the command line, naming the option and the fix, or ''."""
    if args.episodes < 1:
        return f"--episodes {args.episodes}: run at least one episode"
    unknown = sorted(set(args.tasks) - set(TASKS))
    if unknown:
        return f"--tasks {' '.join(unknown)}: the twin has no such task; use some of {', '.join(TASKS)}"
    if not 0.0 <= args.failure_rate <= 1.0:
        return (f"--failure-rate {args.failure_rate:g}: it is the probability that the scripted policy injects a "
                "failure; give a value in [0, 1] (e.g. 0.3)")
    backends = sorted(available_world_models())
    if args.world_model not in backends:
        return (f"--world-model {args.world_model}: no world-model backend of that name is installed (entry-point "
                f"group {ENTRY_POINT_GROUP}); use one of {', '.join(backends) or 'none: reinstall gesim_ros'}")
    config, problem = world_model_config(args)
    if problem or (problem := judge_problem(args)):
        return problem
    if database.exists():  # its episode ids would repeat: the comparator refuses them, the summary misleads
        return (f"--out {out} already holds a {args.mode} run ({database.name}); give a new folder "
                "(or none: the default is a new runs/<mode>-<time>)")
    if "url" in config:  # last: the only check that may wait (SERVER_PROBE_S)
        option = "--world-model-server" if args.world_model_server else "--world-model-config's url"
        return server_problem(option, config["url"])
    return ""


def world_model_config(args) -> tuple[dict, str]:
    """The backend config the world-model node will build (``--world-model-config`` with the url of
    ``--world-model-server``, as session.load_backend does) and what is wrong with it for the chosen
    backend's constructor, or ''. Nothing to check in mode real, which runs no world model. The class is
    imported, not built: a backend may load a model or open connections when built."""
    if "world_model" not in SIDES_BY_MODE[args.mode]:
        return {}, ""
    try:
        config = plugin_config("--world-model-config", args.world_model_config, example=EXAMPLE_CONFIG)
    except PluginConfigError as exc:
        return {}, str(exc)
    if args.world_model_server:
        config["url"] = args.world_model_server
    try:
        ep, cls = load_entry_point(ENTRY_POINT_GROUP, args.world_model, "world model")
    except (ImportError, TypeError, ValueError) as exc:
        return config, f"--world-model {args.world_model}: {exc}"
    if not (isinstance(cls, type) and issubclass(cls, WorldModel)):
        return config, f"--world-model {args.world_model}: {ep.value} is no WorldModel backend; reinstall gesim_ros"
    keys, required, _ = cls.config_keys()
    if args.world_model_server and "url" not in keys:
        return config, (f"--world-model-server {args.world_model_server}: backend {args.world_model} takes no server "
                        "address; use --world-model gesim_http for a world-model server")
    if "url" in required and "url" not in config:
        return config, (f"--world-model {args.world_model} needs a server: give --world-model-server URL (e.g. "
                        f"{EXAMPLE_SERVER}; start one with `{SERVE_HINT}`)")
    return config, _config_key_problem("--world-model-config", f"backend {args.world_model}", config, cls)


def _config_key_problem(option: str, what: str, config: dict, cls) -> str:
    """'' when ``config`` fits the constructor of ``cls`` (a backend or judge class), else what is wrong."""
    keys, required, takes_any = cls.config_keys()
    unknown = sorted(set(config) - keys)
    if unknown and not takes_any:
        return f"{option}: unknown key(s) {unknown} for {what}; it takes {sorted(keys)}"
    missing = sorted(set(required) - set(config))
    if missing:
        return f"{option}: {what} needs key(s) {missing}, e.g. '{json.dumps(dict.fromkeys(missing, '...'))}'"
    return ""


def judge_problem(args) -> str:
    """What is wrong with ``--judge`` and ``--judge-config``, or '' (nothing to check in mode real). A
    judge class's config is checked against its constructor without building it; a factory's (backend,
    none) is the world-model node's to check."""
    if "world_model" not in SIDES_BY_MODE[args.mode]:
        return ""
    judges = sorted(available_judges())
    if args.judge not in judges:
        return (f"--judge {args.judge}: no judge of that name is installed (entry-point group {JUDGE_GROUP}); "
                f"use one of {', '.join(judges) or 'none: reinstall gesim_ros'}")
    try:
        config = plugin_config("--judge-config", args.judge_config, example=EXAMPLE_JUDGE_CONFIG)
        _, target = load_entry_point(JUDGE_GROUP, args.judge, "judge")
    except (PluginConfigError, ImportError) as exc:
        return str(exc)
    if not (isinstance(target, type) and issubclass(target, Judge)):
        return ""
    return _config_key_problem("--judge-config", f"judge {args.judge}", config, target)


def server_problem(option: str, url) -> str:
    """'' when a world-model server answers GET <url>/healthz with 200 within SERVER_PROBE_S, else one
    line naming ``option``, the URL and how to start a server."""
    start = f"start one with `{SERVE_HINT}` and pass --world-model-server {EXAMPLE_SERVER}"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except (TypeError, ValueError, AttributeError):
        parts = port = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{option} {url!r}: not an http(s)://host[:port] URL, e.g. {EXAMPLE_SERVER}"
    connection = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = connection(parts.hostname, port, timeout=SERVER_PROBE_S)
    path = parts.path.rstrip("/") + "/healthz"
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        status = reply.status
        reply.read()
    except TimeoutError:
        return (f"{option} {url}: the server did not answer GET {path} within {SERVER_PROBE_S:g} s; "
                f"is it a world-model server, and not busy? Else {start}")
    except (OSError, http.client.HTTPException) as exc:
        return f"{option} {url}: no world-model server answers there ({exc}); {start}"
    finally:
        conn.close()
    if status != 200:
        return (f"{option} {url}: GET {path} answered HTTP {status}, not 200: not a GE-Sim 2.0 world-model "
                f"server? {start[0].upper()}{start[1:]}")
    return ""


class GraphWatch:
    """Which processes of the graph have exited, and since when."""

    def __init__(self, procs: ProcessGroup):
        self.procs = procs
        self.first_seen: float | None = None

    def exited(self) -> str:
        """The exited processes with their exit codes ('' while all run)."""
        gone = [f"{p.name} (exit code {p.process.returncode})" for p in self.procs.processes
                if p.process.poll() is not None]
        if gone and self.first_seen is None:
            self.first_seen = time.monotonic()
        return ", ".join(gone)

    def interrupt(self) -> str:
        """For the runner: why it must stop, once a process has been gone EXIT_GRACE_S, else ''."""
        gone = self.exited()
        if gone and time.monotonic() - self.first_seen >= EXIT_GRACE_S:
            return f"{gone} exited: lab-run stops the run"
        return ""


def begin_run(name: str, out: Path, problem: str) -> int | None:
    """Start a run: the DDS domain it isolates itself in, with its folder made. None (the command exits 2)
    after one line '<name>: <why>' on stderr when ``problem`` says what is wrong or no domain is free;
    then nothing has been written."""
    if problem:
        print(f"{name}: {' '.join(problem.split())}", file=sys.stderr)
        return None
    try:
        domain = isolate_dds()
    except NoFreeDomainError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return None
    out.mkdir(parents=True, exist_ok=True)
    return domain


@dataclass
class GraphRun:
    """What :func:`run_lab_graph` ran: the runner's result per episode, why the run stopped early ('' if
    it did not) or the error that stopped it, and the graph's processes (stopped, with their exit codes)."""

    results: list = field(default_factory=list)
    stopped: str = ""
    error: str = ""
    procs: ProcessGroup | None = None


def run_lab_graph(folder: Path, database: Path, mode: str, plan: list[tuple[str, int]], arguments: dict, *,
                  episode_timeout_s: float, run_id: str, runner_parameters: tuple = (),
                  progress=print) -> GraphRun:
    """The lab-test graph of ``mode`` (launch/lab_test.launch.yaml with ``arguments``) as separate
    processes logging into ``folder/logs``, the plan's (task, seed) episodes run one at a time by the
    episode runner in this process (each waits for the comparator to record it; ``progress`` gets a
    line per episode), then every process stopped. A process that exits mid-run ends the run after the
    episode it was in (``stopped``). In mode world_model each episode's start is recorded on the twin
    first (``folder/initial_observations``)."""
    from gesim_ros.episodes.runner import STOPPING_ERRORS, run_schedule, runner_context

    arguments = dict(arguments, mode=mode, database=str(database), run_episodes="true")
    if mode == "world_model":
        progress("recording each episode's start on the MuJoCo twin ...")
        arguments["initial_observation"], arguments["max_steps"] = record_starts(folder / "initial_observations", plan)
    launch_file = package_share() / "launch" / "lab_test.launch.yaml"
    nodes = load_launch(launch_file, arguments)
    (runner,) = [n for n in nodes if n.executable == "episode_runner"]  # runs here, one episode at a time
    nodes.remove(runner)
    progress("starting " + ", ".join(n.executable for n in nodes) + f" from {launch_file.name} mode:={mode} ...")
    run = GraphRun(procs=ProcessGroup(folder / "logs"))
    graph = GraphWatch(run.procs)
    common = [Parameter("event_readers", value=len(nodes)),  # every node of the graph follows the events
              Parameter("episode_timeout_s", value=episode_timeout_s),
              Parameter("service_timeout_s", value=120.0), Parameter("policy_wait_s", value=120.0),
              *runner_parameters]
    try:
        for node in nodes:
            run.procs.start(node.executable, *node.command())
        with runner_context(args=runner.command()):  # one DDS participant for every episode's runner
            for index, (task, seed) in enumerate(plan):
                if graph.exited():  # the graph is broken: end the run with what it has rather than wait on it
                    break
                # One episode at a time: the world model finishes imagining it (and the comparator
                # records its outcomes) before the next one is reset.
                done = run_schedule([*common, Parameter("tasks", value=[task]), Parameter("seeds", value=[seed]),
                                     Parameter("run_id", value=f"{run_id}-{index + 1:03d}")],
                                    interrupt=graph.interrupt)
                run.results += done
                if done:
                    wait_for_comparator(database, {r.episode_id for r in done}, timeout_s=120.0, stop=graph.exited)
                    progress(_progress_line(database, index + 1, len(plan), done[0]))
        if gone := graph.exited():
            run.stopped = (f"{gone} exited; {len(plan) - len(run.results)} of {len(plan)} episode(s) not run. "
                           f"Logs: {folder / 'logs'}")
    except STOPPING_ERRORS as exc:
        run.error = f"{type(exc).__name__}: {exc}"
    finally:
        run.procs.stop_all()
    return run


def run(args) -> int:
    name = f"gesim-ros {args.command}"
    out = (args.out or Path("runs") / time.strftime(f"{args.mode}-%Y%m%d-%H%M%S")).resolve()
    database = out / f"{args.mode}.sqlite"
    domain = begin_run(name, out, _argument_problem(args, out, database))
    if domain is None:
        return 2
    plan = [(args.tasks[i % len(args.tasks)], i // len(args.tasks)) for i in range(args.episodes)]
    arguments = {"world_model_backend": args.world_model, "world_model_config": args.world_model_config,
                 "world_model_server": args.world_model_server, "judge": args.judge, "judge_config": args.judge_config,
                 "policy_config": json.dumps({"failure_rate": args.failure_rate})}
    print(f"{args.mode} run in {out} (ROS_DOMAIN_ID={domain}, discovery on this machine only)", flush=True)
    run = GraphRun()
    try:
        run = run_lab_graph(out, database, args.mode, plan, arguments, episode_timeout_s=args.episode_timeout,
                            run_id=out.name, progress=lambda line: print(line, flush=True))
    finally:  # what the runner reported is kept, however the run ended
        (out / "episodes.json").write_text(json.dumps(
            [{**asdict(r), "outcome": r.outcome_name} for r in run.results], indent=2) + "\n")
    if run.error:
        print(f"{name}: {run.error}\n{run.procs.logs()}")
        return 2
    if run.stopped:
        print(f"{name}: {run.stopped}", flush=True)
    dead = [p.name for p in run.procs.processes if p.process.returncode not in (0, -2, 130, None)]
    if dead and not run.stopped:
        print(f"note: {', '.join(dead)} exited with an error; logs in {out / 'logs'}")
    print(f"\n{len(run.results)} episode(s) run\n")
    report = build_report(database)
    html_path, json_path = write_report(database, out / "report")
    print(text_summary(report))
    print(f"\nHTML report: {html_path}\nJSON figures: {json_path}\ndatabase: {database}\n"
          f"runner results: {out / 'episodes.json'}")
    if run.stopped:
        print(f"\nthe run stopped early: {run.stopped}")
        return 1
    return 0


def record_starts(folder: Path, plan: list[tuple[str, int]]) -> tuple[str, str]:
    """Step 0 of every (task, seed) of the plan from the twin, at the twin node's camera size (what a
    shadow episode starts the model from): the world model's initial_observation folder and the
    max_steps that lets the longest planned task run its full length."""
    from gesim_ros.twin.physics import G2Twin
    from gesim_ros.twin.records import record_twin_episode

    folder.mkdir(parents=True, exist_ok=True)
    camera = param_file_names(package_share() / "config" / "g2_twin.yaml", "g2_twin")
    twin = G2Twin(camera_width=camera["camera_width"], camera_height=camera["camera_height"])
    steps = 0
    try:
        for task, seed in sorted(set(plan)):
            record = record_twin_episode(twin, task, seed, failure_rate=0.0, steps=0)
            record.save_npz(folder / f"{record.episode_id}.npz")
            steps = max(steps, round(twin_tasks.get_task(task).time_limit_s / record.control_period_s))
    finally:
        twin.close()
    return str(folder), str(steps)


def wait_for_comparator(database: Path, episode_ids: set[str], timeout_s: float, stop) -> None:
    """Give the comparator time to take the world model's late outcomes and finish every episode;
    return at once when ``stop()`` names an exited process (the episodes stay as recorded)."""
    deadline = time.monotonic() + timeout_s
    pending = episode_ids
    while time.monotonic() < deadline:
        if stop():
            return
        if database.is_file():
            with EpisodeStore(database, readonly=True) as store:
                pending = episode_ids & {e.episode_id for e in store.episodes(status="incomplete")}
            if not pending:
                return
        time.sleep(0.25)
    print(f"note: the comparator had not finished {len(pending)} episode(s) after {timeout_s:.0f} s; "
          "they are reported as incomplete")


def _progress_line(database: Path, index: int, total: int, result) -> str:
    with EpisodeStore(database, readonly=True) as store:
        rows = [e for e in store.episodes() if e.episode_id == result.episode_id]
        done = [e for e in store.episodes(status="complete") if e.mode == result.mode]
    if not rows:
        return (f"episode {index}/{total} {result.task} seed {result.seed}: {result.status}, not recorded by the "
                f"comparator ({result.reason or 'see its log'})")
    row = rows[0]
    sides = SIDES_BY_MODE[result.mode]
    outcomes = ", ".join(f"{side} {getattr(row, f'{side}_outcome')}" for side in sides)
    if len(sides) == 2:
        verdict = f"{outcomes} ({VERDICTS[row.agrees]})"
        judged = [e.agrees for e in done if e.agrees is not None]
        tally = f"agreement {sum(judged)}/{len(judged)}, unjudged {len(done) - len(judged)}"
    else:
        verdict = outcomes
        judged = [o for o in (getattr(e, f"{sides[0]}_outcome") for e in done) if o != UNKNOWN]
        tally = f"{sides[0]} success {judged.count('success')}/{len(judged)}, unjudged {len(done) - len(judged)}"
    if row.status != "complete":
        verdict = f"{row.status} ({outcomes})"
    return f"episode {index}/{total} {result.task} seed {result.seed}: {verdict} ({result.label or '-'}) | {tally}"

"""`gesim-ros rank-policies`: does the world model rank policies as reality does, and how many real
episodes does it save?

K policies (plugins with their configs) x tasks x seeds, each run on the real side (lab_test's mode
real: the MuJoCo twin as the robot) and in the world model (mode world_model), the same task and seed
on both: the *paired* episodes. ``--model-only-seeds M`` more seeds per task run in the world model
alone: the *model-only* episodes prediction-powered inference uses (comparator/ranking.py). Every run
is a job on Ray: a local Ray of ``--workers`` CPUs by default, or an existing cluster
(``--ray-address``). A job is the lab-test graph of one mode for one policy and some (task, seed)s,
started as separate processes exactly as `gesim-ros lab-run` starts them, in a DDS domain of its
worker's own (``isolate_dds`` in the worker: an flock-held free id, held for the worker's life), in a
folder of the worker's own; it sends back its comparator database (``jobs/<job>/<mode>.sqlite``), the
runner's ``episodes.json``, the graph's logs and its episode rows. At most ``--workers`` jobs are in
flight. The run folder gets:

* ``episodes.jsonl`` / ``episodes.csv``: one row per episode (policy, task, seed, side, role,
  status, outcome, episode id, database): everything ``ranking.json`` is recomputed from;
* ``ranking.json``: per policy the success rate on each side (Wilson), agreement, PPI (PPI++ and
  lambda = 1) against the classical interval and the real episodes saved at equal width; across
  policies Pearson r (Fisher z), Spearman rho and MMRV;
* ``ranking.html``: the same with the real-vs-model scatter plot; ``ray_logs/``: Ray's logs.

``--preset scripted-precision``: the scripted policy (the twin's scripted plans) at graded
``failure_rate`` 0, 0.25, 0.5, 0.75, 1 (the knob its plugin config has), whose real success rates
fall in that order.
"""

from __future__ import annotations

import argparse
import csv
import inspect
import io
import json
import math
import os
import re
import shutil
import socket
import sqlite3
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from gesim_ros.comparator import ranking as rk
from gesim_ros.twin import tasks as twin_tasks

TASKS = list(twin_tasks.TASKS)
PRESETS = {
    "scripted-precision": [(f"scripted-fail{round(rate * 100):03d}", "scripted", {"failure_rate": rate})
                           for rate in (0.0, 0.25, 0.5, 0.75, 1.0)],
}
EXAMPLE_POLICY = "noisy=scripted:'{\"failure_rate\": 0.4}'"
RANKING_NAME, HTML_NAME = "ranking.json", "ranking.html"
#: Ray's local session folder: its socket paths must stay under the 107 bytes of AF_UNIX.
RAY_TMP_PARENT = "/tmp"
RAY_PROBE_S = 3.0


def add_arguments(parser) -> None:
    parser.add_argument("--policy", action="append", default=[], metavar="NAME=PLUGIN:CONFIGJSON",
                        help=f"a policy to rank, repeated (e.g. --policy {EXAMPLE_POLICY}); the plugin is an entry "
                             "point of gesim_ros.policies")
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None,
                        help="a policy family whose ranking is known: scripted-precision is the scripted policy at "
                             "failure_rate 0, 0.25, 0.5, 0.75, 1")
    parser.add_argument("--tasks", nargs="+", default=TASKS, help="tasks (default: all)")
    parser.add_argument("--seeds", default="3", metavar="N|A-B",
                        help="paired seeds per task: N (0..N-1) or a range A-B (default %(default)s)")
    parser.add_argument("--model-only-seeds", type=int, default=None, metavar="M",
                        help="world-model-only seeds per task after the paired ones, for PPI (default: as many as "
                             "the paired seeds)")
    parser.add_argument("--workers", type=int, default=2, help="jobs in flight; a local Ray gets this many CPUs "
                                                               "(default %(default)s)")
    parser.add_argument("--ray-address", default="", metavar="ADDR",
                        help="an existing Ray cluster (e.g. 10.0.0.1:6379 or auto) instead of a local Ray")
    parser.add_argument("--job-resources", default="{}", metavar="JSON",
                        help="Ray resources each job holds besides its CPU, e.g. '{\"gesim_server\": 1}' with each GPU "
                             "host started as `ray start ... --resources '{\"gesim_server\": 1}'`: one job per server")
    parser.add_argument("--episodes-per-job", type=int, default=0, metavar="E",
                        help="world-model episodes per job (default: each policy's split over the workers)")
    parser.add_argument("--world-model", default="learned", help="world-model backend (default %(default)s)")
    parser.add_argument("--world-model-server", default="", metavar="URL",
                        help="world-model server for --world-model gesim_http, as lab-run's (on a cluster: the "
                             "address each worker host reaches its own server at, e.g. http://127.0.0.1:9000)")
    parser.add_argument("--world-model-config", default="{}", metavar="JSON", help="the backend's config object")
    parser.add_argument("--judge", default="backend", metavar="NAME", help="the world model's judge, as lab-run's")
    parser.add_argument("--judge-config", default="{}", metavar="JSON", help="the judge's config object")
    parser.add_argument("--episode-timeout", type=float, default=60.0, help="seconds before an episode times out")
    parser.add_argument("--out", type=Path, default=None, help="run folder, new (default runs/rank-<time>)")


# -- the command line ----------------------------------------------------------------------------

def _parse_seeds(text: str) -> list[int]:
    """'3' -> [0, 1, 2]; '5-9' -> [5, ..., 9]; ValueError with the fix otherwise."""
    try:
        if "-" in text:
            first, last = (int(part) for part in text.split("-", 1))
        else:
            first, last = 0, int(text) - 1
    except ValueError:
        raise ValueError(f"--seeds {text}: give a count N (seeds 0..N-1) or a range A-B, e.g. 10 or 0-9") from None
    if first < 0 or last < first:
        raise ValueError(f"--seeds {text}: give at least one seed, none negative (e.g. 3 or 0-2)")
    return list(range(first, last + 1))


def _policy_problem(plugin: str, config: dict) -> str:
    """'' when ``plugin`` is an installed policy whose constructor takes ``config``'s keys."""
    from gesim_ros.plugins import load_entry_point
    from gesim_ros.policy.api import POLICY_GROUP, available_plugins

    plugins = sorted(available_plugins())
    if plugin not in plugins:
        return f"no policy plugin '{plugin}' (entry-point group {POLICY_GROUP}); use one of {', '.join(plugins)}"
    try:
        _, target = load_entry_point(POLICY_GROUP, plugin, "policy")
    except (ImportError, TypeError, ValueError) as exc:
        return f"plugin {plugin}: {exc}"
    owner = getattr(target, "__self__", None)   # Policy.from_config: the class's constructor takes the keys
    if not isinstance(owner, type):
        return ""   # a factory of its own: the policy node checks the config when it starts
    params = [p for p in inspect.signature(owner).parameters.values() if p.kind is not p.VAR_POSITIONAL]
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return ""
    unknown = sorted(set(config) - {p.name for p in params})
    return f"unknown key(s) {unknown} for policy plugin {plugin}; it takes {sorted(p.name for p in params)}" \
        if unknown else ""


def parse_policies(args) -> list[tuple[str, str, dict]]:
    """(name, plugin, config) per policy from --preset and --policy; ValueError naming the fix."""
    from gesim_ros.plugins import PluginConfigError, plugin_config

    policies = list(PRESETS[args.preset]) if args.preset else []
    for text in args.policy:
        name, sep, rest = text.partition("=")
        plugin, _, config_text = rest.partition(":")
        if not sep or not name or not plugin:
            raise ValueError(f"--policy {text}: give NAME=PLUGIN:CONFIGJSON, e.g. --policy {EXAMPLE_POLICY}")
        try:
            config = plugin_config(f"--policy {name}", config_text or "{}", example='{"failure_rate": 0.4}')
        except PluginConfigError as exc:
            raise ValueError(str(exc)) from None
        policies.append((name, plugin, config))
    if len(policies) < 2:
        raise ValueError("rank at least 2 policies: give --preset scripted-precision or --policy NAME=PLUGIN:CONFIGJSON "
                         f"twice or more (e.g. --policy {EXAMPLE_POLICY})")
    names = [p[0] for p in policies]
    if len(set(names)) != len(names):
        raise ValueError(f"policy names repeat ({', '.join(sorted({n for n in names if names.count(n) > 1}))}): "
                         "give each --policy a name of its own")
    for name, plugin, config in policies:
        if "," in name or not name.isprintable():
            raise ValueError(f"--policy {name}: a name without commas or control characters")
        if problem := _policy_problem(plugin, config):
            raise ValueError(f"--policy {name}: {problem}")
    return policies


def _world_model_problem(args) -> str:
    """lab-run's own checks of the world-model and judge options (in mode world_model), the server's
    reachability only on a local Ray (a cluster's workers reach their own)."""
    from gesim_ros.episodes import lab_run

    ns = argparse.Namespace(mode="world_model", world_model=args.world_model,
                            world_model_server=args.world_model_server, world_model_config=args.world_model_config,
                            judge=args.judge, judge_config=args.judge_config)
    backends = sorted(lab_run.available_world_models())
    if args.world_model not in backends:
        return f"--world-model {args.world_model}: no such backend; use one of {', '.join(backends)}"
    config, problem = lab_run.world_model_config(ns)
    if problem or (problem := lab_run.judge_problem(ns)):
        return problem
    if "url" in config and not args.ray_address:
        return lab_run.server_problem("--world-model-server", config["url"])
    return ""


def _ray_address_problem(address: str) -> str:
    """'' when something accepts a TCP connection at the cluster's HOST:PORT within RAY_PROBE_S (Ray
    itself would retry for minutes), else one line with the fix."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=RAY_PROBE_S).close()
    except OSError as exc:
        return (f"--ray-address {address}: no Ray head answers there ({exc}); start one with `ray start --head "
                f"--port {port}` or drop --ray-address for a local Ray")
    return ""


def _argument_problem(args, out: Path) -> tuple[str, list, list[int]]:
    try:
        policies = parse_policies(args)
        seeds = _parse_seeds(args.seeds)
    except ValueError as exc:
        return str(exc), [], []
    unknown = sorted(set(args.tasks) - set(TASKS))
    if unknown:
        return f"--tasks {' '.join(unknown)}: the twin has no such task; use some of {', '.join(TASKS)}", [], []
    if args.model_only_seeds is not None and args.model_only_seeds < 0:
        return f"--model-only-seeds {args.model_only_seeds}: give 0 or more", [], []
    if args.workers < 1:
        return f"--workers {args.workers}: give at least 1", [], []
    if args.episodes_per_job < 0:
        return f"--episodes-per-job {args.episodes_per_job}: give 1 or more (0: split over the workers)", [], []
    try:
        resources = json.loads(args.job_resources)
    except json.JSONDecodeError as exc:
        resources = exc
    if not (isinstance(resources, dict) and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                                                for v in resources.values())):
        return (f"--job-resources {args.job_resources}: give a JSON object of Ray resource names and positive "
                'amounts, e.g. \'{"gesim_server": 1}\'', [], [])
    if args.ray_address and not re.fullmatch(r"auto|(ray://)?[\w.\-]+:\d{1,5}", args.ray_address):
        return (f"--ray-address {args.ray_address}: give the cluster head's HOST:PORT (e.g. 10.0.0.1:6379), "
                "ray://HOST:PORT or auto", [], [])
    if args.ray_address and args.ray_address != "auto" and (problem := _ray_address_problem(args.ray_address)):
        return problem, [], []
    if not args.episode_timeout > 0:
        return f"--episode-timeout {args.episode_timeout:g}: give a positive number of seconds", [], []
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        return f"--out {out}: exists and is not an empty folder; give a new one", [], []
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        return f"Ray is not importable ({exc}); run scripts/bootstrap.sh (it installs ray from requirements.txt)", [], []
    return _world_model_problem(args), policies, seeds


# -- jobs ----------------------------------------------------------------------------------------

def plan_jobs(policies, tasks, seeds, model_only_seeds, workers, episodes_per_job) -> list[dict]:
    """One real job per policy (its paired episodes on the twin, one after another) and its
    world-model episodes (paired and model-only) in chunks: ``episodes_per_job`` each, or split so
    that there are at least ``workers`` jobs of each side in all."""
    extra = list(range(seeds[-1] + 1, seeds[-1] + 1 + model_only_seeds))
    jobs = []
    for index, (name, plugin, config) in enumerate(policies):
        paired = [(t, s, "paired") for s in seeds for t in tasks]
        model = paired + [(t, s, "model_only") for s in extra for t in tasks]
        jobs.append({"policy": name, "plugin": plugin, "config": config, "mode": "real", "plan": paired})
        size = episodes_per_job or math.ceil(len(model) / max(1, math.ceil(workers / len(policies))))
        for start in range(0, len(model), size):
            jobs.append({"policy": name, "plugin": plugin, "config": config, "mode": "world_model",
                         "plan": model[start:start + size]})
    for number, job in enumerate(jobs):
        job["job_id"] = f"{number:03d}-{job['mode']}-{job['policy']}"
    return jobs


def run_job(job: dict, options: dict) -> dict:
    """Run one job in this process (a Ray worker): the lab-test graph of its mode as separate
    processes in this worker's DDS domain, its episodes one at a time, in a folder of its own. Returns
    its rows, the comparator database's bytes, the runner's episodes.json and the graph's logs."""
    from rclpy.parameter import Parameter

    from gesim_ros.comparator.store import EpisodeStore
    from gesim_ros.episodes import lab_run
    from gesim_ros.ros.process_harness import isolate_dds

    started = time.monotonic()
    domain = isolate_dds()
    mode, job_id = job["mode"], job["job_id"]
    work = Path(tempfile.mkdtemp(prefix=f"gesim-rank-{job_id}-"))
    database = work / f"{mode}.sqlite"
    plan = [(task, seed) for task, seed, _ in job["plan"]]
    arguments = {"policy": job["plugin"], "policy_config": json.dumps(job["config"]),
                 "world_model_backend": options["world_model"], "world_model_config": options["world_model_config"],
                 "world_model_server": options["world_model_server"],
                 "judge": options["judge"], "judge_config": options["judge_config"]}
    graph = lab_run.run_lab_graph(work, database, mode, plan, arguments, episode_timeout_s=options["episode_timeout"],
                                  run_id=job_id, runner_parameters=(Parameter("policy_name", value=job["policy"]),),
                                  progress=lambda line: print(f"[{job_id}] {line}", flush=True))
    results, procs, error = graph.results, graph.procs, graph.error or graph.stopped
    if error:  # which process of the graph had exited by itself (an exit code) and which was stopped
        error += "; graph: " + ", ".join(f"{p.name} exit {p.process.returncode}" for p in procs.processes)
    try:
        roles = {(task, seed): role for task, seed, role in job["plan"]}
        recorded = {}
        if database.is_file():
            with EpisodeStore(database, readonly=True) as store:
                recorded = {(e.task, e.seed): e for e in store.episodes() if (e.task, e.seed) in roles}
        rel_db = f"jobs/{job_id}/{database.name}"
        rows = []
        for task, seed, role in job["plan"]:
            e = recorded.get((task, seed))
            rows.append(asdict(rk.EpisodeRow(
                policy=job["policy"], task=task, seed=seed, side=mode, role=role,
                status=e.status if e else "missing", outcome=getattr(e, f"{mode}_outcome") if e else None,
                episode_id=e.episode_id if e else "", database=rel_db)))
        files = {"episodes.json": json.dumps([{**asdict(r), "outcome": r.outcome_name} for r in results],
                                             indent=2).encode() + b"\n"}
        if database.is_file():
            files[database.name] = _sqlite_bytes(database)
        for log in sorted((work / "logs").glob("*.log")):
            files[f"logs/{log.name}"] = log.read_bytes()[-200_000:]
        return {"job_id": job_id, "host": socket.gethostname(), "pid": os.getpid(), "domain": domain,
                "rows": rows, "files": files, "error": error, "wall_s": time.monotonic() - started}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _sqlite_bytes(path: Path) -> bytes:
    """A consistent copy of a SQLite database (WAL included) as bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.sqlite"
        source, target = sqlite3.connect(f"file:{path}?mode=ro", uri=True), sqlite3.connect(copy)
        try:
            source.backup(target)
        finally:
            target.close()
            source.close()
        return copy.read_bytes()


def run_jobs(jobs: list[dict], options: dict, *, workers: int, ray_address: str, log_dir: Path,
             on_result=None, resources: dict | None = None) -> tuple[list[dict], str]:
    """Run ``jobs`` on Ray, at most ``workers`` in flight; return their results in job order and the
    local Ray's session folder ('' on a cluster; removed by then, named so that a check can look for
    processes still using it). A local Ray (no ``ray_address``) gets ``workers`` CPUs, no dashboard,
    its session under /tmp (its logs copied to ``log_dir`` at the end); Ray is always shut down, and a
    job still running when this is interrupted is cancelled so that its graph is stopped."""
    import ray

    session = None
    if ray_address:
        ray.init(address=ray_address, log_to_driver=True)
    else:
        session = tempfile.mkdtemp(prefix="gesim-ray-", dir=RAY_TMP_PARENT)
        ray.init(num_cpus=workers, num_gpus=0, include_dashboard=False, _temp_dir=session, log_to_driver=True,
                 object_store_memory=200 * 1024 * 1024, configure_logging=False)
    remote = ray.remote(num_cpus=1, max_retries=0, resources=dict(resources or {}))(run_job)
    results: dict[str, dict] = {}
    retried: set[str] = set()
    pending: dict = {}
    queue = list(jobs)
    try:
        while queue or pending:
            while queue and len(pending) < workers:
                job = queue.pop(0)
                pending[remote.remote(job, options)] = job
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                job = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # a worker that died: its rows are missing, said so
                    result = _failed_job(job, f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
                if _never_started(result) and job["job_id"] not in retried:
                    # the graph did not come up (a node slow to start on a loaded host): once more
                    retried.add(job["job_id"])
                    print(f"job {job['job_id']}: no episode ran ({result['error'][:200]}); retrying it once",
                          flush=True)
                    queue.insert(0, job)
                    continue
                result["attempts"] = 2 if job["job_id"] in retried else 1
                results[job["job_id"]] = result
                if on_result:
                    on_result(job, result, len(results), len(jobs))
    finally:
        for ref in pending:
            ray.cancel(ref)
        if pending:
            ray.wait(list(pending), num_returns=len(pending), timeout=60)
        ray.shutdown()
        if session:
            logs = Path(session) / "session_latest" / "logs"
            if logs.is_dir():
                shutil.copytree(logs, log_dir, dirs_exist_ok=True, symlinks=False, ignore_dangling_symlinks=True)
            shutil.rmtree(session, ignore_errors=True)
    return [results[j["job_id"]] for j in jobs], session or ""


def _never_started(result: dict) -> bool:
    """A job that failed before recording any episode (its graph did not come up)."""
    return bool(result["error"]) and all(row["status"] == "missing" for row in result["rows"])


def _failed_job(job: dict, error: str) -> dict:
    rows = [asdict(rk.EpisodeRow(policy=job["policy"], task=t, seed=s, side=job["mode"], role=r, status="missing",
                                 outcome=None, episode_id="", database="")) for t, s, r in job["plan"]]
    return {"job_id": job["job_id"], "host": "", "pid": None, "domain": None, "rows": rows, "files": {},
            "error": error, "wall_s": 0.0}


# -- writing the run -----------------------------------------------------------------------------

def _write_atomically(path: Path, data: bytes | str) -> None:
    """Nothing half-written: a reader sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


ROW_FIELDS = list(rk.EpisodeRow.__dataclass_fields__)


def write_rows(out: Path, rows: list[dict]) -> None:
    _write_atomically(out / "episodes.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=ROW_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    _write_atomically(out / "episodes.csv", buffer.getvalue())


def read_rows(out: Path) -> list[rk.EpisodeRow]:
    """The rows of a run folder's episodes.jsonl (what ranking.json recomputes from)."""
    return rk.rows_from_dicts(json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines())


def render_html(ranking: dict) -> str:
    from gesim_ros.comparator.report import charts
    from gesim_ros.comparator.report.html import _TEMPLATES

    ranked = [p for p in ranking["policies"] if p["name"] in ranking["ranked_policies"]]
    points = [{"policy": p["name"], "real_success_rate": p["real_success_rate"],
               "world_model_success_rate": p["model_success_rate"], "n": p["real_n"] + p["model_n"]} for p in ranked]
    plot = charts.scatter("success rate per policy: world model against real", points) if points else None
    return _TEMPLATES.get_template("ranking.html.j2").render(ranking=ranking, scatter_chart=plot)


def summary_lines(ranking: dict) -> list[str]:
    def fmt(s: dict) -> str:
        if s.get("value") is None:
            return f"undefined ({s.get('reason')})"
        ci = s.get("ci95")
        return f"{s['value']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")

    lines = [f"{'policy':<20} {'real':>22} {'model':>22} {'PPI++ (lambda)':>30} {'classical':>22} saved"]
    for p in ranking["policies"]:
        ppi = p["ppi"]
        if ppi.get("value") is None:
            ppi_text, classical, saved = f"undefined: {ppi['reason'][:40]}", "-", "-"
        else:
            ci = ppi["ci95"]
            ppi_text = (f"{ppi['value']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] ({ppi['lam']:.2f})" if ci
                        else f"{ppi['value']:.3f} (no interval)")
            cci = ppi["classical_ci95"]
            classical = f"{ppi['classical_value']:.3f} [{cci[0]:.3f}, {cci[1]:.3f}]" if cci else "degenerate"
            saved = "-" if ppi["real_saved"] is None else f"{ppi['real_saved']:+.1f} of {ppi['n']}"
        lines.append(f"{p['name']:<20} {fmt(p['real_success_rate']):>22} {fmt(p['model_success_rate']):>22} "
                     f"{ppi_text:>30} {classical:>22} {saved}")
    summary = ranking["ppi_summary"]
    lines.append(f"PPI++: the model saves {summary['real_saved']:+.1f} of {summary['real_episodes']} real episodes at "
                 f"equal width over {summary['policies']} policies (mean width {summary['mean_width']:.3f} against "
                 f"classical {summary['mean_classical_width']:.3f})" if summary["policies"]
                 else f"PPI++: real episodes saved: {summary['reason']}")
    lines.append(f"Pearson r {fmt(ranking['pearson'])}; Spearman rho {fmt(ranking['spearman'])}; "
                 f"MMRV {fmt(ranking['mmrv'])} over {len(ranking['ranked_policies'])} policies")
    return lines


def run(args) -> int:
    name = "gesim-ros rank-policies"
    out = (args.out or Path("runs") / time.strftime("rank-%Y%m%d-%H%M%S")).resolve()
    problem, policies, seeds = _argument_problem(args, out)
    if problem:
        print(f"{name}: {problem}", file=sys.stderr)
        return 2
    model_only = len(seeds) if args.model_only_seeds is None else args.model_only_seeds
    jobs = plan_jobs(policies, args.tasks, seeds, model_only, args.workers, args.episodes_per_job)
    options = {"world_model": args.world_model, "world_model_config": args.world_model_config,
               "world_model_server": args.world_model_server, "judge": args.judge,
               "judge_config": args.judge_config, "episode_timeout": args.episode_timeout}
    out.mkdir(parents=True, exist_ok=True)
    episodes = sum(len(j["plan"]) for j in jobs)
    print(f"rank-policies in {out}: {len(policies)} policies x {len(args.tasks)} task(s) x {len(seeds)} paired "
          f"seed(s) + {model_only} model-only; {len(jobs)} jobs, {episodes} episodes, "
          f"{'Ray at ' + args.ray_address if args.ray_address else f'local Ray, {args.workers} worker(s)'}", flush=True)
    started = time.monotonic()
    done_episodes = [0]

    def progress(job, result, finished, total):
        done_episodes[0] += len(job["plan"])
        elapsed = time.monotonic() - started
        eta = elapsed / done_episodes[0] * (episodes - done_episodes[0])
        outcomes = [r["outcome"] or r["status"] for r in result["rows"]]
        tally = ", ".join(f"{o} {outcomes.count(o)}" for o in sorted(set(outcomes)))
        note = f"; {result['error']}" if result["error"] else ""
        print(f"job {finished}/{total} {job['job_id']}: {tally} ({result['wall_s']:.0f} s, domain "
              f"{result['domain']}){note} | {done_episodes[0]}/{episodes} episodes, {elapsed / 60:.1f} min, "
              f"about {eta / 60:.1f} min left", flush=True)
        for rel, data in result["files"].items():
            _write_atomically(out / "jobs" / job["job_id"] / rel, data)

    try:
        results, session = run_jobs(jobs, options, workers=args.workers, ray_address=args.ray_address,
                                    log_dir=out / "ray_logs", on_result=progress,
                                    resources=json.loads(args.job_resources))
    except ConnectionError as exc:   # no Ray cluster at --ray-address
        print(f"{name}: --ray-address {args.ray_address}: {str(exc).splitlines()[0]}", file=sys.stderr)
        if not any(out.iterdir()):
            out.rmdir()
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted; running jobs were cancelled (their graphs stopped), finished jobs' databases "
              f"are in {out / 'jobs'}; no ranking written", flush=True)
        return 130
    wall = time.monotonic() - started
    rows = [row for result in results for row in result["rows"]]
    write_rows(out, rows)
    model_wall = sum(r["wall_s"] for r, j in zip(results, jobs) if j["mode"] == "world_model")
    figures = rk.ranking_from_rows(read_rows(out), [p[0] for p in policies])
    ranking = {
        "format": "gesim_ros.ranking", "version": 1,
        **figures,
        "run": {"tasks": args.tasks, "seeds": seeds, "model_only_seeds": model_only, "workers": args.workers,
                "ray_address": args.ray_address, "world_model": args.world_model, "judge": args.judge,
                "wall_s": wall, "model_job_s": model_wall, "ray_session": session,
                "jobs": [{"job_id": r["job_id"], "host": r["host"], "pid": r["pid"], "domain": r["domain"],
                          "episodes": len(j["plan"]), "wall_s": r["wall_s"], "attempts": r["attempts"],
                          "error": r["error"]}
                         for r, j in zip(results, jobs)]},
        "policy_configs": {n: {"plugin": p, "config": c} for n, p, c in policies},
        "rows": "episodes.jsonl",
        "methods": rk.METHODS,
    }
    _write_atomically(out / RANKING_NAME, json.dumps(ranking, indent=2, allow_nan=False) + "\n")
    _write_atomically(out / HTML_NAME, render_html(ranking))
    print("\n" + "\n".join(summary_lines(ranking)))
    failed = [r for r in results if r["error"]]
    print(f"\n{len(rows)} episodes in {wall / 60:.1f} min; ranking: {out / RANKING_NAME}\nreport: {out / HTML_NAME}\n"
          f"rows: {out / 'episodes.jsonl'}")
    if failed:
        print(f"{len(failed)} job(s) stopped early: " + "; ".join(f"{r['job_id']}: {r['error']}" for r in failed))
        return 1
    return 0

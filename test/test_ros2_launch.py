"""Every launch file under the real `ros2 launch` (ros2/launch 3.7.1, launch_ros 0.28.0 from
../shared/ros2-launch, or a system ROS 2), from a colcon install of this checkout, as a robot
workstation runs them; and launch_graph (what lab-run starts) agreeing with it: the same nodes with
the same parameters read back from each, and the same episodes. The colcon install space itself
(`colcon build --base-paths . msg`, the README's workstation command) holds the nodes and the
interfaces, and they are used from there."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from rcl_interfaces.srv import GetParameters, ListParameters
from rclpy.parameter import parameter_value_to_python

from gesim_ros.comparator.store import EpisodeStore
from gesim_ros.contract.contract import load_contract
from gesim_ros.contract.modes import SIDES_BY_MODE
from gesim_ros.episodes.data import EpisodeRecord
from gesim_ros.ros.launch_graph import LaunchFileError, load_launch, package_share, read_args
from gesim_ros.ros.process_harness import call_answered, spin_until
from gesim_ros.tools.real_launch import LaunchProcess, RealLaunchUnavailable, prepare
from shared_peers import peer_missing

pytestmark = pytest.mark.slow

EPISODES = 1  # one episode shows the graph runs and ends as lab-run's does
TASKS = "[push]"
PROGRESS = re.compile(r"episode (\d+)/(\d+) (\S+) seed (\d+) \[(\w+)\]: (\w+) \(([^)]*)\)")


@pytest.fixture(scope="module")
def real_launch(tmp_path_factory):
    try:
        return prepare(tmp_path_factory.mktemp("colcon"))
    except RealLaunchUnavailable as exc:
        peer_missing(str(exc))


FROM_INSTALL_SPACE = """
import gesim_ros_interfaces, gesim_ros, rclpy
from gesim_ros_interfaces.msg import ActionChunk
from gesim_ros.contract.messages import action_chunk_msg
from rclpy.serialization import serialize_message, deserialize_message
print(gesim_ros_interfaces.__file__)
print(gesim_ros.__file__)
msg = action_chunk_msg(1.0, "base_link", "ep", 3, ["a"], [[0.5], [0.25]], 0.1)
back = deserialize_message(serialize_message(msg), ActionChunk)
assert back == msg, back
print("roundtrip ok")
"""


def test_the_colcon_install_space_holds_the_nodes_and_serves_the_interfaces(real_launch, tmp_path):
    install = Path(real_launch["COLCON_PREFIX_PATH"].split(":")[0])
    assert (install / "gesim_ros" / "lib" / "gesim_ros" / "topic_monitor").exists()
    assert (install / "gesim_ros" / "share" / "gesim_ros" / "package.xml").exists()
    use = subprocess.run([sys.executable, "-c", FROM_INSTALL_SPACE], cwd=tmp_path, env=real_launch,
                         capture_output=True, text=True, timeout=120)
    assert use.returncode == 0, use.stdout + use.stderr
    interfaces_file, package_file, status = use.stdout.strip().splitlines()[-3:]
    assert interfaces_file.startswith(str(install)), interfaces_file
    assert package_file.startswith(str(install)), package_file
    assert status == "roundtrip ok"


@pytest.fixture(scope="module")
def start_file(tmp_path_factory):
    """A recorded episode start, for the world model in world_model mode (it refuses to start without)."""
    path = tmp_path_factory.mktemp("start") / "start.npz"
    EpisodeRecord(episode_id="start", task="push", task_text="push", seed=0, success=True, label="success",
                  control_period_s=1 / 30, joint_names=list(load_contract().arm_joint_names),
                  actions=np.zeros((0, 16), np.float32), joint_positions=np.zeros((1, 16), np.float32),
                  frames={"head": np.zeros((1, 8, 8, 3), np.uint8)}).save_npz(path)
    return path


def _node_parameters(ros_node, name: str, timeout: float = 120.0) -> dict:
    """Every parameter node ``/name`` holds, asked of the running node."""
    lister = ros_node.create_client(ListParameters, f"/{name}/list_parameters")
    getter = ros_node.create_client(GetParameters, f"/{name}/get_parameters")
    try:
        assert lister.wait_for_service(timeout_sec=timeout), f"node {name} did not come up"
        names = call_answered(ros_node, lister, ListParameters.Request(), timeout=20).result.names
        values = call_answered(ros_node, getter, GetParameters.Request(names=list(names)), timeout=20).values
        return {n: parameter_value_to_python(v) for n, v in zip(names, values)}
    finally:
        ros_node.destroy_client(lister)
        ros_node.destroy_client(getter)


def _graph_parameters(ros_node, names) -> dict:
    return {name: _node_parameters(ros_node, name) for name in sorted(names)}


def _graph_nodes(ros_node, names, timeout: float = 30.0) -> set:
    """The other nodes the graph lists, once it lists ``names`` or ``timeout`` passes. A node's name reaches
    the graph on its own discovery topic, which can arrive after its parameter services answer."""
    def others():
        return set(ros_node.get_node_names()) - {ros_node.get_name()}

    spin_until(ros_node, lambda: others() == names, timeout)
    return others()


PARITY_CASES = [
    ("lab_test", {"mode": "shadow"}),
    ("lab_test", {"mode": "real", "armed": "false"}),
    ("lab_test", {"mode": "world_model"}),
    ("shadow", {"armed": "true", "world_model_backend": "kinematic"}),
    ("real_robot", {}),
    ("real_robot", {"use_world_model": "true", "mode": "shadow", "policy_config": '{"failure_rate": 1}'}),
    ("world_model_only", {"max_steps": "90"}),
]


@pytest.mark.parametrize("launch_file, arguments", PARITY_CASES,
                         ids=[f"{f}-{'-'.join(a.values()) or 'defaults'}" for f, a in PARITY_CASES])
def test_ros2_launch_and_launch_graph_start_the_same_nodes_with_the_same_parameters(
        launch_file, arguments, real_launch, start_file, procs, ros_node, tmp_path, monkeypatch):
    if "world_model" in (arguments.get("mode"), launch_file.removesuffix("_only")):
        arguments = {**arguments, "initial_observation": str(start_file)}
    path = package_share() / "launch" / f"{launch_file}.launch.yaml"
    if "database" in {a.name for a in read_args(path)}:
        arguments = {**arguments, "database": str(tmp_path / "db.sqlite")}
    expected = load_launch(path, arguments)
    names = {n.name for n in expected}

    launched = LaunchProcess(real_launch, path.name, arguments, tmp_path / "launch.log", cwd=tmp_path)
    try:
        through_launch = _graph_parameters(ros_node, names)
        time.sleep(3.0)  # the robot files stay up: nothing exits on its own
        assert launched.process.poll() is None and "process has died" not in launched.log(), launched.log()[-4000:]
        assert _graph_nodes(ros_node, names) == names
    finally:
        launched.stop()
    assert "Traceback" not in launched.log(), launched.log()[-4000:]

    monkeypatch.chdir(tmp_path)
    for node in expected:
        procs.start(node.executable, *node.command())
    through_graph = _graph_parameters(ros_node, names)
    assert through_graph == through_launch
    if "armed" in arguments:  # the command line's, not a value an include set on its way
        assert through_launch["backend_switch"]["armed"] is (arguments["armed"] == "true")


def _progress(log: str) -> list[tuple]:
    """The runner's per-episode lines: (index, task, seed, mode, outcome word, side)."""
    return [(int(m[1]), m[3], int(m[4]), m[5], m[6], m[7].split(",")[0]) for m in PROGRESS.finditer(log)]


def _starts(folder):
    """world_model mode: each planned episode's start, recorded on the twin as lab-run records it."""
    from gesim_ros.episodes.lab_run import record_starts

    return record_starts(folder, [("push", seed) for seed in range(EPISODES)])


@pytest.mark.parametrize("mode", ["shadow", "real", "world_model"])
def test_lab_test_runs_its_episodes_under_ros2_launch_like_lab_run(mode, real_launch, tmp_path):
    """The graph ends by itself after lab-run's plan of the same options (`lab-run --mode M --episodes N
    --tasks push`: push seeds 0..N-1), every episode recorded complete with the decisive side's outcome.
    lab-run itself runs each mode in test_lab_integration."""
    database = tmp_path / "launch.sqlite"
    arguments = {"mode": mode, "run_episodes": "true", "episodes": str(EPISODES), "tasks": TASKS,
                 "database": str(database)}
    if mode == "world_model":
        arguments["initial_observation"], arguments["max_steps"] = _starts(tmp_path / "starts")
    launched = LaunchProcess(real_launch, "lab_test.launch.yaml", arguments, tmp_path / "launch.log", cwd=tmp_path)
    try:
        rc = launched.wait(timeout=600)  # the graph ends by itself once the runner is done
    finally:
        launched.stop()
    log = launched.log()
    assert rc == 0, log[-6000:]
    assert "process has died" not in log and "Traceback" not in log, log[-6000:]
    assert log.count("process has finished cleanly") == len(load_launch(
        package_share() / "launch" / "lab_test.launch.yaml", arguments)), log[-4000:]

    progress = _progress(log)
    assert [(i, task, seed, m) for i, task, seed, m, _, _ in progress] == [
        (i + 1, "push", i, mode) for i in range(EPISODES)], log[-4000:]
    with EpisodeStore(database, readonly=True) as store:
        rows = sorted(store.episodes(), key=lambda e: e.episode_id)
    assert [r.status for r in rows] == ["complete"] * EPISODES, [(r.episode_id, r.status) for r in rows]
    decisive = SIDES_BY_MODE[mode][0]
    for (_, _, seed, _, outcome, side), row in zip(progress, rows):
        assert (row.task, row.seed, row.mode) == ("push", seed, mode)
        assert side == decisive and getattr(row, f"{decisive}_outcome") == outcome.lower(), (progress, row)


def test_replay_shadow_runs_its_episodes_under_ros2_launch_like_replay_shadow(real_launch, tmp_path):
    """replay_shadow.launch.yaml as a workstation launches it: the graph ends by itself once the
    replay has run the dataset, and its comparator file holds what `gesim-ros replay-shadow` gives."""
    gesim = sys.prefix + "/bin/gesim-ros"
    dataset = tmp_path / "collected"
    collect = subprocess.run([gesim, "collect", "--task", "push", "--episodes", str(EPISODES), "--failure-rate",
                              "0.5", "--out", str(dataset)], capture_output=True, text=True, timeout=600)
    assert collect.returncode == 0, collect.stdout[-4000:] + collect.stderr[-4000:]
    successes = json.loads((dataset / "summary.json").read_text())["success"]

    database = tmp_path / "launch.sqlite"
    arguments = {"dataset": str(dataset), "database": str(database)}
    launched = LaunchProcess(real_launch, "replay_shadow.launch.yaml", arguments, tmp_path / "launch.log",
                             cwd=tmp_path)
    try:
        rc = launched.wait(timeout=600)
    finally:
        launched.stop()
    log = launched.log()
    assert rc == 0, log[-6000:]
    assert "process has died" not in log and "Traceback" not in log, log[-6000:]

    out = tmp_path / "replay-shadow"
    run = subprocess.run([gesim, "replay-shadow", str(dataset), "--out", str(out)], capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    compared = {}
    for name, path in (("launch", database), ("cli", out / "replay_shadow.sqlite")):
        with EpisodeStore(path, readonly=True) as store:
            compared[name] = sorted((e.episode_id, e.status, e.real_outcome, e.world_model_outcome,
                                     e.world_model_judge_success_prob) for e in store.episodes())
    launched_rows = compared["launch"]
    assert [r[1] for r in launched_rows] == ["complete"] * EPISODES, launched_rows
    assert sorted(r[2] for r in launched_rows) == ["failure"] * (EPISODES - successes) + ["success"] * successes
    assert all(r[3] in ("success", "failure") for r in launched_rows), launched_rows  # the model judged each
    assert [r[:4] for r in launched_rows] == [r[:4] for r in compared["cli"]]
    # the same commands from the same recorded start: the same judged rollout
    assert [r[4] for r in launched_rows] == pytest.approx([r[4] for r in compared["cli"]], abs=1e-3)


def test_ctrl_c_stops_every_node_cleanly_and_keeps_the_interrupted_episode(real_launch, tmp_path):
    database = tmp_path / "interrupted.sqlite"
    arguments = {"run_episodes": "true", "episodes": "3", "database": str(database)}
    launched = LaunchProcess(real_launch, "lab_test.launch.yaml", arguments, tmp_path / "launch.log", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 300
        while "started: task" not in launched.log() and time.monotonic() < deadline:
            assert launched.process.poll() is None, launched.log()[-4000:]
            time.sleep(0.2)
        assert "started: task" in launched.log(), launched.log()[-4000:]
        launched.interrupt()
        rc = launched.wait(timeout=60)
    finally:
        launched.stop()
    log = launched.log()
    assert rc == 0, log[-6000:]
    nodes = load_launch(package_share() / "launch" / "lab_test.launch.yaml", arguments)
    assert log.count("process has finished cleanly") == len(nodes), log[-6000:]
    assert "process has died" not in log and "Traceback" not in log, log[-6000:]
    with EpisodeStore(database, readonly=True) as store:
        (first, *_) = sorted(store.episodes(), key=lambda e: e.episode_id)
    assert first.status in ("aborted", "complete"), first  # recorded either way, never left running
    if first.status == "aborted":
        assert "interrupted" in (first.abort_reason or ""), first


SEMANTICS = """launch:
- arg: {name: dir}
- arg: {name: flag, default: "1"}
- arg: {name: label, default: plain}
- arg: {name: empty, default: ""}
- node:
    {pkg: gesim_ros, exec: comparator, name: equal_as_booleans, if: "$(equals $(var flag) true)",
     param: [{name: database, value: "$(var dir)/a.sqlite"}, {name: record, value: false}]}
- node:
    {pkg: gesim_ros, exec: comparator, name: equal_as_numbers, if: "$(equals 1.0 1)",
     param: [{name: database, value: "$(var dir)/b.sqlite"}, {name: record, value: false}]}
- node:
    {pkg: gesim_ros, exec: comparator, name: equal_when_empty, if: "$(equals $(var empty) '$(var empty)')",
     param: [{name: database, value: "$(var dir)/c.sqlite"}, {name: record, value: false}]}
- node:
    {pkg: gesim_ros, exec: comparator, name: empty_quotes_are_not_empty, if: "$(equals $(var empty) '')",
     param: [{name: database, value: "$(var dir)/e.sqlite"}, {name: record, value: false}]}
- node:
    {pkg: gesim_ros, exec: comparator, name: never_started, unless: "$(equals plain $(var label))",
     param: [{name: database, value: "$(var dir)/d.sqlite"}, {name: record, value: false}]}
- include: {file: "$(var dir)/inner.launch.yaml", arg: [{name: inner, value: from_the_include}]}
- node:
    {pkg: gesim_ros, exec: comparator, name: after_the_include,
     param: [{name: database, value: "$(var dir)/$(var label)-$(var inner)-$(var inner_default).sqlite"},
             {name: record, value: false}]}
"""
INNER = """launch:
- arg: {name: inner}
- arg: {name: inner_default, default: inner_file_default}
"""


def test_launch_graph_reads_substitutions_and_includes_as_ros2_launch_does(real_launch, procs, ros_node, tmp_path,
                                                                           monkeypatch):
    """$(equals) on booleans, numbers and an empty operand (launch reads an empty quoted one as '[]');
    substituted text never expanded again (a
    label holding '$(env HOME)' stays that text); an include's argument and an included file's
    default stay set after the include. The same nodes and parameters through both."""
    path = tmp_path / "semantics.launch.yaml"
    path.write_text(SEMANTICS)
    (tmp_path / "inner.launch.yaml").write_text(INNER)
    for label in ("plain", "$(env HOME)"):
        arguments = {"dir": str(tmp_path), "label": label}
        expected = load_launch(path, arguments)
        names = {n.name for n in expected}
        assert names == {"equal_as_booleans", "equal_as_numbers", "equal_when_empty", "after_the_include"} | (
            {"never_started"} if label != "plain" else set())
        launched = LaunchProcess(real_launch, str(path), arguments, tmp_path / "launch.log", cwd=tmp_path)
        try:
            through_launch = _graph_parameters(ros_node, names)
            assert _graph_nodes(ros_node, names) == names
        finally:
            launched.stop()
        assert through_launch["after_the_include"]["database"] == (
            f"{tmp_path}/{label}-from_the_include-inner_file_default.sqlite")
        monkeypatch.chdir(tmp_path)
        group = [procs.start(n.executable, *n.command()) for n in expected]
        assert _graph_parameters(ros_node, names) == through_launch
        for process in group:
            process.stop()
        spin_until(ros_node, lambda: not set(ros_node.get_node_names()) & names, 30)


def test_an_unset_environment_variable_stops_both(real_launch, tmp_path):
    path = tmp_path / "env.launch.yaml"
    path.write_text("launch:\n- node: {pkg: gesim_ros, exec: comparator, name: c, namespace: $(env GESIM_ROS_UNSET)}\n")
    with pytest.raises(LaunchFileError, match="environment variable 'GESIM_ROS_UNSET' is not set"):
        load_launch(path)
    launched = LaunchProcess(real_launch, str(path), {}, tmp_path / "launch.log", cwd=tmp_path)
    try:
        rc = launched.wait(timeout=120)
    finally:
        launched.stop()
    assert rc not in (0, None) and "environment variable 'GESIM_ROS_UNSET' does not exist" in launched.log()

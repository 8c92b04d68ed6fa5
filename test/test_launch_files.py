"""Launch files are checked without `ros2 launch`: every executable, parameter file and parameter
name they reference exists, and every parameter is one its node declares (asked of the running
node, so a typo cannot hide in a launch file)."""

import importlib.metadata

import numpy as np
import pytest
from rcl_interfaces.srv import ListParameters

from gesim_ros.contract.contract import load_contract, message_class
from gesim_ros.episodes.data import EpisodeRecord
from gesim_ros.comparator.store import EpisodeStore
from gesim_ros.ros.launch_graph import (LaunchFileError, launch_files, load_launch, package_share, param_file_names,
                                    read_args)
from gesim_ros.ros.process_harness import spin_until

EXPECTED = {"real_robot.launch.yaml", "world_model_only.launch.yaml", "shadow.launch.yaml", "lab_test.launch.yaml",
            "replay_shadow.launch.yaml"}


def _console_scripts() -> set[str]:
    dist = importlib.metadata.distribution("gesim_ros")
    return {ep.name for ep in dist.entry_points if ep.group == "console_scripts"}


def _all_nodes():
    """Every node of every launch file, with every optional part switched on, in every mode it offers."""
    nodes = []
    for path in launch_files():
        args = read_args(path)
        switches = {a.name: "true" for a in args if a.name in ("run_episodes", "use_world_model")}
        variants = [{a.name: choice} for a in args for choice in a.choices] or [{}]
        for variant in variants:
            nodes += [(path.name, n) for n in load_launch(path, {**switches, **variant})]
    return nodes


def _flatten(params: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in params.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def test_the_four_ways_a_lab_works_have_launch_files():
    assert {p.name for p in launch_files()} == EXPECTED


def test_executables_and_parameter_files_exist():
    scripts = _console_scripts()
    for launch_name, node in _all_nodes():
        assert node.package == "gesim_ros", launch_name
        assert node.executable in scripts, f"{launch_name}: no executable '{node.executable}'"
        for path in node.param_files:
            assert path.is_file(), f"{launch_name}: parameter file {path} is missing"
            assert param_file_names(path, node.name), f"{path} sets nothing for node '{node.name}'"


def test_reader_refuses_what_it_cannot_honour(tmp_path):
    bad = tmp_path / "bad.launch.yaml"
    bad.write_text("launch:\n- executable: {cmd: ls}\n")
    with pytest.raises(LaunchFileError, match="not supported"):
        load_launch(bad)
    with pytest.raises(LaunchFileError, match="unknown argument"):
        load_launch(launch_files()[0], {"no_such_argument": "1"})
    with pytest.raises(LaunchFileError, match="mode:=sim is not a valid value; pass mode:= one of shadow, real, "
                                              "world_model"):
        load_launch(package_share() / "launch" / "lab_test.launch.yaml", {"mode": "sim"})


def test_the_replay_graph_has_no_robot_and_no_policy():
    """The replay node is the robot side and the policy: the switch beside it is never armed."""
    nodes = {n.name: n for n in load_launch(package_share() / "launch" / "replay_shadow.launch.yaml")}
    assert sorted(nodes) == ["backend_switch", "comparator", "episode_replay", "world_model"]
    assert (nodes["backend_switch"].params["mode"], nodes["backend_switch"].params["armed"]) == ("shadow", False)
    assert nodes["world_model"].params["mode"] == "shadow"


@pytest.mark.parametrize("mode, graph", [
    ("shadow", ["g2_twin", "backend_switch", "world_model", "policy", "comparator"]),
    ("real", ["g2_twin", "backend_switch", "policy", "comparator"]),
    ("world_model", ["backend_switch", "world_model", "policy", "comparator"])])
def test_the_lab_test_graph_follows_its_mode(mode, graph):
    nodes = load_launch(package_share() / "launch" / "lab_test.launch.yaml", {"mode": mode})
    assert sorted(n.name for n in nodes) == sorted(graph)
    assert {n.params["mode"] for n in nodes if n.name in ("backend_switch", "world_model")} == {mode}


def _runner_resets(node) -> set[str]:
    """The reset services the runner a launch file starts calls, over the modes it runs."""
    from gesim_ros.episodes.plan import reset_services_for
    from gesim_ros.episodes.runner import PARAMETERS

    params = {name: default for name, (default, _) in PARAMETERS.items()}
    for path in node.param_files:
        params.update(param_file_names(path, node.name))
    params.update(node.params)
    return {key for mode in params["backend_modes"]
            for key in reset_services_for(params["reset_services"], params["robot_reset"] or "", mode)}


@pytest.mark.parametrize("launch_file, arguments, resets", [
    ("real_robot", {}, set()),
    ("real_robot", {"use_world_model": "true", "mode": "shadow"}, {"world_model_sync"}),
    ("shadow", {}, {"world_model_sync"}),
    ("world_model_only", {}, {"world_model_sync"}),
    ("lab_test", {"mode": "shadow"}, {"twin_reset", "world_model_sync"}),
    ("lab_test", {"mode": "real"}, {"twin_reset"}),
    ("lab_test", {"mode": "world_model"}, {"world_model_sync"}),
])
def test_only_the_lab_test_resets_the_twin(launch_file, arguments, resets):
    """A physical robot serves no twin_reset: the robot files' runner calls none unless told to; the
    lab test's, with the twin as its robot, resets it before every episode it acts in."""
    path = package_share() / "launch" / f"{launch_file}.launch.yaml"
    nodes = load_launch(path, {**arguments, "run_episodes": "true"})
    (runner,) = [n for n in nodes if n.executable == "episode_runner"]
    assert _runner_resets(runner) == resets


@pytest.mark.slow
def test_the_robot_launch_file_runs_an_episode_on_a_robot_that_serves_no_reset(procs, ros_node, tmp_path):
    """real_robot.launch.yaml with run_episodes:=true against the synthetic G2 (contract_publisher),
    which serves no reset service, as a physical robot: the runner resets nothing, the episode runs,
    and the operator's label (EpisodeControl LABEL) is its outcome, recorded by the comparator."""
    control_spec = load_contract().service("episode_control")
    Control = message_class(control_spec.type)
    control = ros_node.create_client(Control, control_spec.resolve("/"))
    database = tmp_path / "robot.sqlite"
    nodes = load_launch(package_share() / "launch" / "real_robot.launch.yaml",
                        {"run_episodes": "true", "tasks": "[push]", "episodes": "1", "database": str(database)})
    procs.start("contract_publisher", "--ros-args", "-p", "camera_scale:=0.1")
    started = {n.name: procs.start(n.executable, *n.command()) for n in nodes}
    runner = started["episode_runner"]

    assert control.wait_for_service(timeout_sec=60), f"the runner serves no episode_control:\n{runner.log()}"
    labelled = []  # the operator labels the running episode as soon as there is one
    while not labelled and runner.running:
        future = control.call_async(Control.Request(command=Control.Request.LABEL, outcome=1, note="on the line"))
        assert spin_until(ros_node, future.done, timeout=30), "the runner's episode_control does not answer"
        if future.result().accepted:
            labelled.append(future.result().episode_id)
        else:
            spin_until(ros_node, lambda: False, timeout=0.5)
    assert spin_until(ros_node, lambda: not runner.running, timeout=60), "the runner did not finish"
    log = runner.log()
    assert runner.process.returncode == 0, log
    assert labelled and "episode 1/1 push seed 0 [real]: SUCCESS (operator, success, on the line)" in log, log
    assert not [name for name, _ in ros_node.get_service_names_and_types() if "reset" in name]  # none to call
    (episode_id,) = labelled
    started["comparator"].stop()  # it finishes what it has before it exits
    with EpisodeStore(database, readonly=True) as store:
        (row,) = store.episodes()
    assert (row.episode_id, row.status, row.mode, row.real_outcome) == (episode_id, "complete", "real", "success")


@pytest.mark.slow
def test_every_parameter_is_declared_by_its_node(procs, ros_node, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nodes that create files (the comparator's database) do it here
    wanted: dict[str, tuple] = {}
    for launch_name, node in _all_nodes():
        names = set(node.params)
        for path in node.param_files:
            names |= set(_flatten(param_file_names(path, node.name)))
        executable, _, known = wanted.get(node.name, (node.executable, node, set()))
        wanted[node.name] = (executable, node, known | {(n, launch_name) for n in names})
    # The runner runs its episodes and exits, so it cannot be asked; it declares exactly its
    # PARAMETERS table (and the contract), which is checked instead.
    from gesim_ros.episodes.runner import PARAMETERS
    runner = wanted.pop("episode_runner")
    undeclared = sorted(f"{n} (in {where})" for n, where in runner[2] if n not in {*PARAMETERS, "contract"})
    assert not undeclared, f"node episode_runner does not declare: {undeclared}"
    # In world_model mode the node refuses to start without a recorded episode start to sync from.
    start = tmp_path / "start.npz"
    EpisodeRecord(episode_id="start", task="push", task_text="push", seed=0, success=True, label="success",
                  control_period_s=1 / 30, joint_names=list(load_contract().arm_joint_names),
                  actions=np.zeros((0, 16), np.float32), joint_positions=np.zeros((1, 16), np.float32),
                  frames={"head": np.zeros((1, 8, 8, 3), np.uint8)}).save_npz(start)
    for name, (executable, node, _) in wanted.items():
        starts = ["-p", f"initial_observation:={start}"] if node.params.get("mode") == "world_model" else []
        if executable == "episode_replay":  # it needs a dataset; it waits for 99 event readers, so it stays up
            starts = ["-p", f"dataset:={tmp_path}", "-p", "event_readers:=99", "-p", "peer_wait_s:=600.0"]
        procs.start(executable, *node.command(), *starts)
    for name, (executable, node, references) in wanted.items():
        client = ros_node.create_client(ListParameters, f"/{name}/list_parameters")
        assert client.wait_for_service(timeout_sec=90), f"{executable} did not come up:\n{procs.logs()}"
        future = client.call_async(ListParameters.Request())
        assert spin_until(ros_node, future.done, timeout=30), name
        declared = set(future.result().result.names)
        undeclared = sorted(f"{n} (in {where})" for n, where in references if n not in declared)
        assert not undeclared, f"node {name} does not declare: {undeclared}"


def test_reader_types_and_scopes_as_ros2_launch_does(tmp_path, monkeypatch):
    """What test_ros2_launch checks against the real launch system, here without it: launch_ros's
    parameter typing, global (unscoped) include arguments, substitution output never expanded again,
    and the errors where launch would go on silently."""
    (tmp_path / "inner.launch.yaml").write_text("launch:\n- arg: {name: inner}\n- arg: {name: armed, default: 'false'}\n")
    outer = tmp_path / "outer.launch.yaml"
    outer.write_text(f"""launch:
- arg: {{name: count, default: "3"}}
- arg: {{name: text, default: plain}}
- include: {{file: {tmp_path}/inner.launch.yaml, arg: [{{name: inner, value: set_by_include}}, {{name: armed, value: "true"}}]}}
- node:
    pkg: gesim_ros
    exec: comparator
    param:
    - {{name: quoted_list, value: "[shadow]"}}
    - {{name: list, value: [shadow]}}
    - {{name: substituted_list, value: "[$(var text)]"}}
    - {{name: number, value: $(var count)}}
    - {{name: flag, value: $(var armed)}}
    - {{name: forced_string, value: "'$(var count)'"}}
    - {{name: leaked, value: $(var inner)}}
    - {{name: literal, value: "x$(var text)"}}
""")
    (node,) = load_launch(outer, {"text": "$(env HOME)"})
    assert node.params == {"quoted_list": "[shadow]", "list": ["shadow"], "substituted_list": ["$(env HOME)"],
                           "number": 3, "flag": True, "forced_string": "3", "leaked": "set_by_include",
                           "literal": "x$(env HOME)"}
    with pytest.raises(LaunchFileError, match=r"armed:=false would be replaced by the include of inner.launch.yaml"):
        load_launch(outer, {"armed": "false"})
    monkeypatch.delenv("GESIM_ROS_UNSET", raising=False)
    env = tmp_path / "env.launch.yaml"
    env.write_text("launch:\n- node: {pkg: gesim_ros, exec: comparator, namespace: $(env GESIM_ROS_UNSET)}\n")
    with pytest.raises(LaunchFileError, match="environment variable 'GESIM_ROS_UNSET' is not set"):
        load_launch(env)
    (tmp_path / "undeclared.launch.yaml").write_text(
        f"launch:\n- include: {{file: {tmp_path}/inner.launch.yaml, arg: [{{name: inner, value: a}}, {{name: typo, value: b}}]}}\n")
    with pytest.raises(LaunchFileError, match=r"passes \['typo'\], which inner.launch.yaml does not declare"):
        load_launch(tmp_path / "undeclared.launch.yaml")

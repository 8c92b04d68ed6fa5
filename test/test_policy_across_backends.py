"""One unchanged policy process against the twin, then against the world model.

The graph of a lab test without the robot, each node in its own process: the `g2_twin` standing in for
the robot, the `world_model` (the shipped learned model, world_model mode, starting from step 0 of the
twin's episode), the `backend_switch` (armed), the `policy` (scripted plugin) and one `episode_runner`
that runs the task in mode real, then asks the switch (SelectBackend) for mode world_model and runs it
again. The policy never restarts and never learns which backend it drives; the switch forwards every
one of its commands to the side it drives, and each side ends the episode as the plan was designed to.
"""

from __future__ import annotations

import pytest
from gesim_ros_interfaces.msg import BackendStatus

from gesim_ros.contract.contract import load_contract, message_class, ros_qos
from gesim_ros.twin.controllers import make_controller
from gesim_ros.ros.process_harness import spin_until
from gesim_ros.twin.physics import G2Twin
from gesim_ros.twin.records import record_twin_episode
from gesim_ros.twin.tasks import get_task

C = load_contract()
EVENT = message_class("gesim_ros_interfaces/msg/EpisodeEvent")
EVENTS = C.topic("episode_events")
WAIT_S = 180.0  # hang guard for the whole run
TASK, SEED, FAILURE_RATE = "unplug", 1, 0.0
CAMERA = {"camera_width": 64, "camera_height": 40}
OUTCOMES = {"success": EVENT.OUTCOME_SUCCESS, "failure": EVENT.OUTCOME_FAILURE}


def save_start_of_episode(path) -> int:
    """Step 0 of the twin's (TASK, SEED) episode at the twin node's camera size, as the world model's
    recorded starting point; returns the task's length in control steps (the model's max_steps)."""
    twin = G2Twin(C, **CAMERA)
    try:
        record = record_twin_episode(twin, TASK, SEED, FAILURE_RATE, steps=0)
    finally:
        twin.close()
    record.save_npz(path)
    return round(get_task(TASK).time_limit_s / record.control_period_s)


@pytest.mark.slow
def test_one_policy_runs_an_episode_on_the_twin_then_on_the_world_model(procs, ros_node, tmp_path):
    events, status = [], []
    ros_node.create_subscription(EVENT, EVENTS.resolve("/"), events.append, ros_qos(EVENTS.qos))
    status_spec = C.topic("backend_status")
    ros_node.create_subscription(BackendStatus, status_spec.resolve("/"), status.append, ros_qos(status_spec.qos))
    max_steps = save_start_of_episode(tmp_path / f"{TASK}.npz")

    procs.start("g2_twin", "--ros-args", *(a for k, v in CAMERA.items() for a in ("-p", f"{k}:={v}")))
    procs.start("world_model", "--ros-args", "-p", "backend:=learned", "-p", "mode:=world_model",
                "-p", f"initial_observation:={tmp_path / f'{TASK}.npz'}", "-p", "camera_scale:=0.1",
                "-p", f"max_steps:={max_steps}")   # the model judges its episode at the task's time limit
    # The switch's safety timeouts are its own tests' business: here a process stalled by a loaded host
    # (no chunk for 0.5 s, no joint state for 1 s) must not turn into holds and refusals.
    procs.start("backend_switch", "--ros-args", "-p", "mode:=real", "-p", "armed:=true",
                "-p", "command_period_s:=0.0333", "-p", "policy_timeout_s:=5.0", "-p", "max_state_age_s:=5.0")
    policy = procs.start("policy", "--ros-args", "-p", "policy:=scripted",
                         "-p", f"policy_config:='{{\"failure_rate\": {FAILURE_RATE}}}'")
    # The scripted plan runs on episode time from STARTED: its inputs must already flow by then.
    state = C.topic("joint_states").resolve(C.namespace("policy"))
    assert spin_until(ros_node, lambda: ros_node.count_publishers(state) and ros_node.count_subscribers(state),
                      WAIT_S), "the switch's relay to the policy never appeared"
    # Right after the real episode's ENDED the runner asks for world_model: the switch must not
    # refuse it as "episode running" whichever of the two reaches it first.
    runner = procs.start("episode_runner", "--ros-args", "-p", f"tasks:=[{TASK}]", "-p", f"seeds:=[{SEED}]",
                         "-p", "backend_modes:=[real, world_model]", "-p", "select_backend:=true",
                         "-p", "robot_reset:=twin_reset",
                         "-p", "policy_name:=scripted", "-p", "run_id:=across", "-p", "episode_timeout_s:=90.0",
                         "-p", "service_timeout_s:=60.0", "-p", "policy_wait_s:=60.0")
    assert spin_until(ros_node, lambda: not runner.running, WAIT_S), "the runner did not finish"
    assert runner.process.returncode == 0, runner.log()
    # What the plan was designed to do (with no failure injected: pull the plug out), both sides must do:
    # the twin by physics, the model by imagining the same episode from the same start and actions.
    designed = make_controller(TASK, SEED, FAILURE_RATE).plan.expected_label
    assert designed == "success"
    for index, mode in enumerate(("real", "world_model"), 1):
        assert f"episode {index}/2 {TASK} seed {SEED} [{mode}]" in runner.log()
        episode_id = f"across-{index:03d}"
        assert spin_until(ros_node, lambda: any(e.episode_id == episode_id and e.event == EVENT.ENDED
                                                for e in events), 30.0), f"no ENDED for {episode_id}"
        # (The runner's STARTED may go out before this process is discovered; the outcome echoes it.)
        (outcome,) = of(events, episode_id, EVENT.OUTCOME)   # one: the twin sits the model's episode out
        assert (outcome.side, outcome.backend_mode, outcome.task, outcome.seed) == (mode, mode, TASK, SEED)
        assert outcome.task_text == "pull the black plug out of the socket"
        (ended,) = of(events, episode_id, EVENT.ENDED)
        assert (ended.side, ended.outcome) == (mode, OUTCOMES[designed]), (ended, designed)

    assert policy.running
    policy_log = policy.log()
    assert "episode across-001: task 'unplug'" in policy_log and "episode across-002: task 'unplug'" in policy_log
    assert spin_until(ros_node, lambda: status and status[-1].mode == "world_model", 10.0)
    # Every chunk of the policy went to the side it drove: the twin, then the model; none was refused.
    forwarded, rejected = (dict(zip(status[-1].paths, counts))
                           for counts in (status[-1].message_counts, status[-1].rejection_counts))
    assert forwarded["real.commands"] > 0 and forwarded["world_model.commands"] > 0, forwarded
    assert rejected["real.commands"] == rejected["world_model.commands"] == 0, (rejected, status[-1].last_error)


def of(events, episode_id, kind):
    return [e for e in events if e.episode_id == episode_id and e.event == kind]

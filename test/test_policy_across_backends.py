"""One unchanged policy process against the twin, then against the world model.

The graph of a lab test without the robot, each node in its own process: the `g2_twin` standing in for
the robot, the `world_model` (kinematic backend, world_model mode, starting from step 0 of a twin
episode), the `backend_switch` (armed), the `policy` (scripted plugin) and one `episode_runner` that runs
the task in mode real, then asks the switch (SelectBackend) for mode world_model and runs it again. The
policy never restarts and never learns which backend it drives.
"""

from __future__ import annotations

import numpy as np
import pytest
from gesim_ros_interfaces.msg import BackendStatus

from gesim_ros.contract import load_contract, message_class, ros_qos
from gesim_ros.episode_data import EpisodeRecord
from gesim_ros.testing import spin_until
from gesim_ros.twin_physics import G2Twin

C = load_contract()
EVENT = message_class("gesim_ros_interfaces/msg/EpisodeEvent")
EVENTS = C.topic("episode_events")
WAIT_S = 180.0  # hang guard for the whole run
TASK, SEED = "unplug", 1
# Two-second chunks, and the world model judges its episode after one: the switch checks each chunk's
# first row against the measured state of the side it drives, which lags behind a moving plan (a
# squeezing gripper never reaches its target), so later chunks are often refused and the model would
# otherwise never reach max_steps.
HORIZON = 60


def save_start_of_episode(path) -> None:
    """Step 0 of the twin's (TASK, SEED) episode, as the world model's recorded starting point."""
    twin = G2Twin(C, camera_width=64, camera_height=40)
    spec = twin.reset(TASK, SEED)
    views = {t.key: t.view for t in C.cameras if t.view}
    frames = {views[key]: np.stack([rgb, rgb]) for key, rgb in twin.render_cameras().items()}
    q = twin.joint_state()[0][[C.joint_names.index(n) for n in C.arm_joint_names]].astype(np.float32)
    twin.close()
    EpisodeRecord(episode_id="start", task=TASK, task_text=spec.task_text, seed=SEED, success=False,
                  label="in_progress", control_period_s=1 / 30, joint_names=list(C.arm_joint_names),
                  actions=q[None], joint_positions=np.stack([q, q]), frames=frames).save_npz(path)


@pytest.mark.slow
def test_one_policy_runs_an_episode_on_the_twin_then_on_the_world_model(procs, ros_node, tmp_path):
    events, status = [], []
    ros_node.create_subscription(EVENT, EVENTS.resolve("/"), events.append, ros_qos(EVENTS.qos))
    status_spec = C.topic("backend_status")
    ros_node.create_subscription(BackendStatus, status_spec.resolve("/"), status.append, ros_qos(status_spec.qos))
    save_start_of_episode(tmp_path / f"{TASK}.npz")

    procs.start("g2_twin", "--ros-args", "-p", "camera_width:=64", "-p", "camera_height:=40")
    procs.start("world_model", "--ros-args", "-p", "backend:=kinematic", "-p", "mode:=world_model",
                "-p", f"initial_observation:={tmp_path / f'{TASK}.npz'}", "-p", "camera_scale:=0.1",
                "-p", f"max_steps:={HORIZON}")   # the model judges (and so ends) its episode after one chunk
    procs.start("backend_switch", "--ros-args", "-p", "mode:=real", "-p", "armed:=true",
                "-p", "command_period_s:=0.0333")
    policy = procs.start("policy", "--ros-args", "-p", "policy:=scripted",
                         "-p", f"policy_config:='{{\"chunk_horizon\": {HORIZON}}}'")
    # The scripted plan runs on episode time from STARTED: its inputs must already flow by then.
    state = C.topic("joint_states").resolve(C.namespace("policy"))
    assert spin_until(ros_node, lambda: ros_node.count_publishers(state) and ros_node.count_subscribers(state),
                      WAIT_S), "the switch's relay to the policy never appeared"
    # Right after the real episode's ENDED the runner asks for world_model: the switch must not
    # refuse it as "episode running" whichever of the two reaches it first.
    runner = procs.start("episode_runner", "--ros-args", "-p", f"tasks:=[{TASK}]", "-p", f"seeds:=[{SEED}]",
                         "-p", "backend_modes:=[real, world_model]", "-p", "select_backend:=true",
                         "-p", "policy_name:=scripted", "-p", "run_id:=across", "-p", "episode_timeout_s:=90.0",
                         "-p", "service_timeout_s:=60.0", "-p", "policy_wait_s:=60.0")
    assert spin_until(ros_node, lambda: not runner.running, WAIT_S), "the runner did not finish"
    assert runner.process.returncode == 0, runner.log()
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
        assert ended.side == mode and ended.outcome in (EVENT.OUTCOME_SUCCESS, EVENT.OUTCOME_FAILURE)

    assert policy.running
    policy_log = policy.log()
    assert "episode across-001: task 'unplug'" in policy_log and "episode across-002: task 'unplug'" in policy_log
    assert spin_until(ros_node, lambda: status and status[-1].mode == "world_model", 10.0)
    # The policy's chunks went to the twin, then to the model (forwarded, or refused by the switch's
    # validation: it checks a chunk against the measured state, which lags the plan on a loaded host).
    routed = {path: sent + refused for path, sent, refused in
              zip(status[-1].paths, status[-1].message_counts, status[-1].rejection_counts)}
    assert routed["real.commands"] > 0 and routed["world_model.commands"] > 0, routed


def of(events, episode_id, kind):
    return [e for e in events if e.episode_id == episode_id and e.event == kind]

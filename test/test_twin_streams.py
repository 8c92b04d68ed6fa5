"""TwinStreams (no ROS node): every contract sensor topic on its sim-time schedule in the contract's
encoding, command validation and chunk tracking, and `gesim-ros collect` read back from MCAP."""

import json
import math

import numpy as np
import pytest

from gesim_ros import cli
from gesim_ros.contract.contract import load_contract, message_class
from gesim_ros.episodes.recording import bag_message_counts, episode_record, read_messages
from gesim_ros.contract.image_codec import from_compressed_msg, from_image_msg
from gesim_ros.contract.messages import action_chunk_msg, joint_state_msg, points_from_cloud, seconds
from gesim_ros.twin.controllers import make_controller, run_episode
from gesim_ros.twin.physics import G2Twin
from gesim_ros.twin.streams import TwinStreams

W, H = 32, 20
C = load_contract()
ARM = list(C.arm_joint_names)
EVENT = message_class("gesim_ros_interfaces/msg/EpisodeEvent")


@pytest.fixture(scope="module")
def streams():
    s = TwinStreams(C, camera_width=W, camera_height=H, stamp_offset_s=100.0)
    yield s
    s.close()


def by_key(messages):
    out = {}
    for key, msg in messages:
        out.setdefault(key, []).append(msg)
    return out


def test_every_sensor_topic_at_its_rate_in_sim_time(streams):
    streams.reset("push", 0)
    start = streams.stamp
    got = by_key(streams.advance(streams.time + 1.0))
    sensors = {t.key: t for t in C.topics_with_role("sensor")}
    assert set(got) == set(sensors)
    for key, msgs in got.items():
        spec = sensors[key]
        assert len(msgs) == spec.rate_hz + 1, key        # t = 0, 1/rate, ..., 1 s
        assert all(isinstance(m, message_class(spec.type)) for m in msgs)
        assert {m.header.frame_id for m in msgs} == {spec.frame_id}
        stamps = np.array([seconds(m.header.stamp) for m in msgs]) - start
        np.testing.assert_allclose(np.diff(stamps), 1.0 / spec.rate_hz, atol=1e-6)
        assert stamps[0] == pytest.approx(0.0, abs=1e-6)
    later = by_key(streams.advance(streams.time + 0.1))
    assert len(later["joint_states"]) == 10 and len(later["lidar"]) == 1


def test_stamps_keep_increasing_across_resets(streams):
    streams.reset("unplug", 1)
    last = seconds(streams.advance(streams.time + 0.2)[-1][1].header.stamp)
    streams.reset("pick_place", 2)
    first = streams.advance(streams.time)
    assert {k for k, _ in first} == {t.key for t in C.topics_with_role("sensor")}
    assert min(seconds(m.header.stamp) for _, m in first) > last


@pytest.mark.parametrize("profile", ["g2_gdk", "genie_sim"])
def test_messages_in_the_contracts_encoding(profile):
    c = load_contract(profile)
    s = TwinStreams(c, camera_width=W, camera_height=H)
    try:
        s.reset("pick_place", 3)
        got = dict(s.advance(0.0))
    finally:
        s.close()
    for cam in c.cameras:
        msg = got[cam.key]
        if cam.encoding in ("16UC1", "32FC1"):
            depth = from_image_msg(msg).astype(np.float64) * (1e-3 if cam.encoding == "16UC1" else 1.0)
            assert msg.encoding == cam.encoding and depth.shape == (H, W)
            assert 0.3 < np.median(depth) < 3.0          # metres: the table seen from the head
        elif cam.type.endswith("CompressedImage"):
            assert msg.format == f"rgb8; {cam.encoding} compressed bgr8"
            assert from_compressed_msg(msg).shape == (H, W, 3)
        else:
            assert msg.encoding == cam.encoding and from_image_msg(msg).shape == (H, W, 3)
    joints = got["joint_states"]
    assert list(joints.name) == list(c.joint_names)
    assert len(joints.position) == len(joints.velocity) == len(joints.effort) == len(c.joint_names)
    assert got["imu"].linear_acceleration.z == pytest.approx(9.81, abs=0.05)
    assert len(points_from_cloud(got["lidar"])) > 100
    for side in ("left", "right"):
        pad = got[f"tactile_{side}"]
        assert len(pad.normal_force) == pad.rows * pad.cols
        assert pad.header.frame_id == c.topic(f"tactile_{side}").frame_id


def test_depth_in_millimetres_matches_metres():
    frames = {}
    for profile in ("g2_gdk", "genie_sim"):
        c = load_contract(profile)
        s = TwinStreams(c, camera_width=W, camera_height=H)
        s.reset("push", 4)
        frames[profile] = from_image_msg(dict(s.advance(0.0))["head_depth"])
        s.close()
    np.testing.assert_allclose(frames["g2_gdk"] / 1000.0, frames["genie_sim"], atol=0.0006)


def chunk(streams, rows, period=1 / 30, stamp=None, names=ARM):
    return action_chunk_msg(streams.stamp if stamp is None else stamp, "base_link", "ep", 0, names,
                            np.asarray(rows, dtype=float), period)


def home_arm(streams):
    pos = streams.twin.joint_state()[0]
    return np.array([pos[C.joint_names.index(n)] for n in ARM])


def bump(q, amounts):
    """Rows of ``q`` with joint 0 (left shoulder pitch: limits +-3 rad, home -0.76) moved by ``amounts``."""
    rows = np.tile(q, (len(np.atleast_1d(amounts)), 1))
    rows[:, 0] += amounts
    return rows


def targets(streams, names=ARM):
    m, d = streams.twin.model, streams.twin.data
    return np.array([d.ctrl[m.actuator(n).id] for n in names])


BAD = [  # name, command from (streams, home arm positions), what the reason says
    ("nan", lambda s, q: joint_state_msg(0, "", ARM, np.where(np.arange(16) == 3, np.nan, q)), "must be finite"),
    ("inf", lambda s, q: chunk(s, [q, np.where(np.arange(16) == 0, np.inf, q)]), "must be finite"),
    ("unknown name", lambda s, q: joint_state_msg(0, "", ARM[:-1] + ["elbow"], q), "unknown joint name"),
    ("missing names", lambda s, q: joint_state_msg(0, "", [], q[:1]), "names no joints"),
    ("short positions", lambda s, q: joint_state_msg(0, "", ARM, q[:15]), "15 target values for 16 joints"),
    ("chunk length", lambda s, q: _bad_horizon(chunk(s, [q, q])), "32 target values for 16 joints x horizon 3"),
    ("out of limits", lambda s, q: joint_state_msg(0, "", ARM[-1:], [0.2]), "outside its limits"),
    ("too fast", lambda s, q: joint_state_msg(0, "", ARM, bump(q, 0.2)[0]), "in one control period"),
    ("too fast inside a chunk", lambda s, q: chunk(s, bump(q, [0, 0, 0.2])), "at step 2"),
    ("no period", lambda s, q: chunk(s, [q], period=0.0), "control period 0.0 s"),
    ("stamp ahead", lambda s, q: chunk(s, [q], stamp=s.stamp + 5.0), "ahead of the twin's clock"),
    ("stale", lambda s, q: chunk(s, [q, q], stamp=s.stamp - 5.0), "stale"),
]


def _bad_horizon(msg):
    msg.horizon = 3
    return msg


@pytest.mark.parametrize("make,reason", [(m, r) for _, m, r in BAD], ids=[b[0] for b in BAD])
def test_bad_commands_are_rejected_counted_and_never_stepped(streams, make, reason):
    streams.reset("unplug", 2)
    streams.advance(streams.time + 0.3)
    q = home_arm(streams)
    ctrl_before = streams.twin.data.ctrl.copy()
    rejected = sum(streams.rejected.values())
    result = streams.command(make(streams, q))
    assert not result.accepted and reason in result.reason
    assert sum(streams.rejected.values()) == rejected + 1 and reason in streams.last_rejection
    streams.advance(streams.time + 0.5)
    np.testing.assert_array_equal(streams.twin.data.ctrl, ctrl_before)
    np.testing.assert_allclose(home_arm(streams), q, atol=2e-3)     # it holds where it was


def test_chunk_rows_apply_at_their_control_period(streams):
    streams.reset("push", 5)
    streams.advance(streams.time + 0.1)
    q = home_arm(streams)
    period, steps = 0.05, np.linspace(0.0, 0.09, 10)
    rows = q + steps[:, None] * (np.arange(16) < 14)            # arms only; grippers stay
    start = streams.time
    assert streams.command(chunk(streams, rows, period)).accepted
    for k in (0, 3, 9):
        streams.advance(start + k * period + 0.01)
        np.testing.assert_allclose(targets(streams), rows[k], atol=1e-12)
    streams.advance(start + 2.0)                                 # after the last row: hold it
    np.testing.assert_allclose(targets(streams), rows[-1], atol=1e-12)
    np.testing.assert_allclose(home_arm(streams)[:14], rows[-1][:14], atol=0.01)
    assert streams.accepted["action_chunk"] >= 1


def test_a_chunk_runs_on_its_stamp_and_replaces_the_plan_from_there(streams):
    streams.reset("push", 6)
    q = home_arm(streams)
    now = streams.stamp
    first = bump(q, np.linspace(0, 0.05, 20))
    assert streams.command(chunk(streams, first, 0.05, stamp=now)).accepted
    # Due from now + 0.5 s (row 10 of the first chunk), continuing smoothly from it.
    second = bump(first[10], np.linspace(0, -0.04, 5))
    assert streams.command(chunk(streams, second, 0.05, stamp=now + 0.5)).accepted
    streams.advance(streams.time + 0.46)
    np.testing.assert_allclose(targets(streams), first[9], atol=1e-12)   # the second is not due yet
    streams.advance(streams.time + 0.06)
    np.testing.assert_allclose(targets(streams), second[0], atol=1e-12)
    streams.advance(streams.time + 1.0)
    np.testing.assert_allclose(targets(streams), second[-1], atol=1e-12)  # first's rows are gone


def test_a_chunk_must_continue_from_where_the_robot_is_commanded(streams):
    streams.reset("push", 7)
    q = home_arm(streams)
    rows = bump(q, np.linspace(0, 0.45, 10))
    assert streams.command(chunk(streams, rows, 0.05)).accepted
    streams.advance(streams.time + 1.5)
    result = streams.command(chunk(streams, [q], 0.05))   # back by 0.45 rad > 2 rad/s x 0.05 s
    assert not result.accepted and "in one control period" in result.reason
    assert streams.command(chunk(streams, bump(rows[-1], [0.05, 0.1]), 0.05)).accepted


def test_a_hold_at_the_measured_position_passes_while_the_servo_lags(streams):
    streams.reset("push", 8)
    q = home_arm(streams)
    assert streams.command(chunk(streams, bump(q, [0.06, 0.12, 0.18, 0.24]))).accepted   # 2 rad/s x 1/30 s
    streams.advance(streams.time + 1 / 30 + 0.005)
    measured = home_arm(streams)
    assert targets(streams)[0] - measured[0] > 2.0 / 30     # the target ran ahead by more than a step
    assert streams.command(joint_state_msg(0, "", ARM, measured)).accepted
    np.testing.assert_allclose(targets(streams), measured, atol=1e-12)
    result = streams.command(joint_state_msg(0, "", ARM, bump(measured, 0.2)))
    assert not result.accepted and "in one control period" in result.reason


def test_scripted_chunks_through_the_streams_reproduce_the_twin_episode(streams):
    ctrl = make_controller("unplug", 11, failure_mode="fast_approach")
    reference = run_episode(G2Twin(C), ctrl)
    streams.reset("unplug", 11)
    start, k = streams.time, 0
    while not streams.done:
        assert streams.command(chunk(streams, ctrl.chunk(k, 10), ctrl.period_s)).accepted
        streams.advance(start + (k + 10) * ctrl.period_s)
        k += 10
    assert streams.twin.outcome() == reference and reference.label == "collision"


def test_a_hold_at_the_published_joint_state_passes(streams):
    """What the backend switch sends when it stops the robot: every joint at its published position.
    At the gripper's stop MuJoCo's raw opening exceeds the limit by ~1e-17 around here."""
    ctrl = make_controller("unplug", 1)
    streams.reset("unplug", 1)
    start, states = streams.time, []
    for k in range(0, 140, 10):
        assert streams.command(chunk(streams, ctrl.chunk(k, 10), ctrl.period_s)).accepted
        states += [m for key, m in streams.advance(start + (k + 10) * ctrl.period_s) if key == "joint_states"]
    lower, upper = np.array([C.joint_limits[n] for n in C.joint_names]).T
    for msg in states:
        assert (np.asarray(msg.position) >= lower).all() and (np.asarray(msg.position) <= upper).all()
    hold = joint_state_msg(0, "", states[-1].name, states[-1].position)
    assert streams.command(hold).accepted


def test_commands_need_a_scene():
    s = TwinStreams(C, camera_width=W, camera_height=H)
    with pytest.raises(RuntimeError, match=r"call reset\(task, seed\) first"):
        s.command(joint_state_msg(0, "", ARM[:1], [0.0]))
    with pytest.raises(RuntimeError, match="call reset"):
        s.advance(1.0)


def test_collect_two_episodes_reads_back(tmp_path, capsys):
    out = tmp_path / "eps"
    argv = ["collect", "--task", "unplug", "--episodes", "2", "--failure-rate", "0.5", "--seed-start", "40",
            "--out", str(out), "--camera-width", str(W), "--camera-height", str(H)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "episode 2/2 unplug seed 41" in printed and "episodes/min" in printed and "ETA" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["per_task"]["unplug"]["episodes"] == 2
    for ep in summary["episode_list"]:
        folder = out / ep["folder"]
        counts = bag_message_counts(folder)
        assert counts == ep["message_counts"]
        assert counts[C.topic("joint_states").resolve("/")] == math.ceil(6.0 * 100) + 1  # the task's 6 s
        assert counts[C.topic("action_chunk").resolve("/")] == 18            # 180 steps in chunks of 10
        assert counts[C.topic("episode_events").resolve("/")] == 2
        events = [m for _, _, m in read_messages(folder, [C.topic("episode_events").resolve("/")])]
        assert [e.event for e in events] == [EVENT.STARTED, EVENT.OUTCOME]
        assert (events[0].task, events[0].seed, events[0].policy, events[0].task_text) == (
            "unplug", ep["seed"], "scripted", "pull the black plug out of the socket")
        assert (events[1].side, events[1].label, events[1].reason) == ("real", ep["label"], ep["injected_failure"])
        rec = episode_record(folder, C, image_size_hw=(H, W))
        assert (rec.task, rec.seed, rec.label, rec.failure_mode) == ("unplug", ep["seed"], ep["label"],
                                                                    ep["injected_failure"] or None)
        assert rec.actions.shape == (180, 16) and rec.frames["head"].shape == (181, H, W, 3)
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*.mcap")}
    assert cli.main(argv) == 0                                  # again: both folders kept, not rewritten
    again = json.loads((out / "summary.json").read_text())
    assert [e["resumed"] for e in again["episode_list"]] == [True, True] and again["recorded_now"] == 0
    assert [e["label"] for e in again["episode_list"]] == [e["label"] for e in summary["episode_list"]]
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.mcap")} == mtimes
    # train-wm reads collect's folders as they are; a rosbag carries no scene state (object poses are the
    # twin's supervision), so the scene-judging model refuses to train on them alone, saying so
    checkpoint = tmp_path / "wm.pt"
    assert cli.main(["train-wm", "--data", str(out), "--out", str(checkpoint), "--epochs", "1",
                     "--batch-size", "2", "--heldout-fraction", "0"]) == 2
    assert "none of the 2 episodes records scene_state" in capsys.readouterr().err and not checkpoint.exists()

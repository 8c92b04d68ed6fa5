import numpy as np
import pytest

from gesim_ros.contract import messages as m
from gesim_ros.contract.contract import PROFILE_DIR, load_contract, message_class
from gesim_ros.episodes.recording import (
    EpisodeBagWriter, RecordingError, bag_message_counts, episode_record, recorded_topics)
from gesim_ros.contract.image_codec import ENCODINGS, to_compressed_msg, to_image_msg

C = load_contract()
NAMES = list(C.arm_joint_names)
EVENT = message_class("gesim_ros_interfaces/msg/EpisodeEvent")


def _event(kind, **fields):
    msg = EVENT(event=kind, episode_id="ep-1", task="push", task_text="push the block", seed=3, **fields)
    return msg


def _png_frame(k, key, t):
    return to_compressed_msg(np.full((40, 64, 3), 10 * k, np.uint8), "rgb8", "png", header=m.header(t, key))


def _write_episode(path, steps=6, period=0.1, with_outcome=True, contract=C, camera_msg=_png_frame, replans=()):
    """An episode of one chunk of ``steps`` rows at t=0, then the chunks ``replans`` ((stamp s, targets)
    each, received in that order), with joint states and frames every ``period`` until the last row is due."""
    topics = dict(recorded_topics(contract, "/"))

    def ns(key):
        return contract.topic(key).resolve("/")

    with EpisodeBagWriter(path, topics.items()) as w:
        w.write_message(C.topic("episode_events").resolve("/"), 0, _event(EVENT.STARTED))
        targets = np.tile(np.linspace(0, 0.05, steps)[:, None], (1, 16)) + 0.01
        w.write_message(ns("action_chunk"), 1, m.action_chunk_msg(0.0, "base_link", "ep-1", 0, NAMES, targets, period))
        for sequence, (stamp_s, rows) in enumerate(replans, 1):
            w.write_message(ns("action_chunk"), 1 + sequence,
                            m.action_chunk_msg(stamp_s, "base_link", "ep-1", sequence, NAMES, rows, period))
        due = max([steps * period] + [stamp_s + len(rows) * period for stamp_s, rows in replans])
        for k in range(round(due / period) + 1):
            t = k * period
            stamp = int(t * 1e9) + 2
            w.write_message(ns("joint_states"), stamp, m.joint_state_msg(t, "base_link", NAMES, np.full(16, k, float)))
            for key in ("head_color", "hand_left_color", "hand_right_color"):
                w.write_message(ns(key), stamp, camera_msg(k, key, t))
            depth = contract.topic("head_depth").encoding
            w.write_message(ns("head_depth"), stamp, to_image_msg(np.full((4, 4), 500, ENCODINGS[depth][0]), depth,
                                                                  m.header(t, "d")))
        if with_outcome:
            w.write_message(C.topic("episode_events").resolve("/"), int(9e9),
                            _event(EVENT.OUTCOME, side="real", outcome=EVENT.OUTCOME_FAILURE, label="missed_grasp",
                                   reason="grasp_offset"))
    return w.counts


def test_round_trip_counts_and_arrays(tmp_path):
    counts = _write_episode(tmp_path / "ep")
    read = bag_message_counts(tmp_path / "ep")
    assert {k: v for k, v in counts.items() if v} == {k: v for k, v in read.items() if v}
    rec = episode_record(tmp_path / "ep", C, image_size_hw=(20, 32))
    assert (rec.task, rec.task_text, rec.seed, rec.success, rec.label) == ("push", "push the block", 3, False, "missed_grasp")
    assert rec.actions.shape == (6, 16) and rec.joint_positions.shape == (7, 16)
    np.testing.assert_allclose(rec.joint_positions[:, 0], np.arange(7))  # sample k is the state before step k
    assert rec.frames["head"].shape == (7, 20, 32, 3)
    assert [int(f.mean()) for f in rec.frames["left_wrist"]] == [10 * k for k in range(7)]
    assert rec.control_period_s == pytest.approx(0.1)


def test_a_chunk_replaces_the_rows_planned_from_its_stamp_on_as_the_robot_does(tmp_path):
    # a receding-horizon policy: a new chunk every 3 steps, each planning 6 rows ahead
    first = np.tile(np.linspace(0, 0.05, 6)[:, None], (1, 16)) + 0.01
    second, third = first + 0.1, first + 0.2
    _write_episode(tmp_path / "ep", replans=[(0.3, second), (0.6, third)])
    rec = episode_record(tmp_path / "ep", C, image_size_hw=(20, 32))
    np.testing.assert_allclose(rec.actions, np.concatenate([first[:3], second[:3], third]), atol=1e-6)
    assert rec.joint_positions.shape == (13, 16)


def test_incomplete_episode_and_bad_paths(tmp_path):
    _write_episode(tmp_path / "ep", with_outcome=False)
    with pytest.raises(RecordingError, match="no real outcome"):
        episode_record(tmp_path / "ep", C)
    with pytest.raises(RecordingError, match="not a rosbag2 episode folder"):
        bag_message_counts(tmp_path)
    with pytest.raises(RecordingError, match="already exists"):
        EpisodeBagWriter(tmp_path / "ep", [])


# a frame's colour at step k, and that colour in each raw encoding a lab's contract may give its cameras
def _RGB(k):
    return np.array([10 * k, 100 + k, 200 - k], np.uint8)


_RAW = {"rgb8": _RGB, "bgr8": lambda k: _RGB(k)[::-1], "rgba8": lambda k: np.append(_RGB(k), 255),
        "mono8": lambda k: np.uint8(10 * k)}


@pytest.mark.parametrize("encoding", list(_RAW))
def test_raw_camera_frames_of_every_colour_encoding_are_recorded_as_rgb(tmp_path, encoding):
    yaml = (PROFILE_DIR / "genie_sim.yaml").read_text().replace("encoding: rgb8", f"encoding: {encoding}")
    (tmp_path / "lab.yaml").write_text(yaml)
    contract = load_contract(str(tmp_path / "lab.yaml"))

    def raw_frame(k, key, t):
        pixel = _RAW[encoding](k)
        return to_image_msg(np.full((40, 64, *pixel.shape), pixel, np.uint8), encoding, m.header(t, key))

    _write_episode(tmp_path / "ep", contract=contract, camera_msg=raw_frame)
    rec = episode_record(tmp_path / "ep", contract, image_size_hw=(20, 32))
    expected = np.array([[10 * k] * 3 if encoding == "mono8" else _RGB(k) for k in range(7)], np.uint8)
    for view in ("head", "left_wrist", "right_wrist"):
        assert rec.frames[view].shape == (7, 20, 32, 3)
        np.testing.assert_array_equal(rec.frames[view][:, 0, 0], expected)
        assert (rec.frames[view] == rec.frames[view][:, :1, :1]).all()  # uniform frames stay uniform


def test_a_depth_frame_on_a_view_camera_is_refused_naming_the_folder_and_topic(tmp_path):
    def depth_frame(k, key, t):
        return to_image_msg(np.full((40, 64), 500, np.uint16), "16UC1", m.header(t, key))

    _write_episode(tmp_path / "ep", contract=load_contract("genie_sim"), camera_msg=depth_frame)
    with pytest.raises(ValueError, match=r"ep: /genie_sim/head_front_camera_rgb: Image encoding '16UC1' is depth"):
        episode_record(tmp_path / "ep", load_contract("genie_sim"))

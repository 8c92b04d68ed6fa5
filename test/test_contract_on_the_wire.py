"""The contract on the wire: a synthetic G2 in one process, the topic monitor in another. What arrives
is checked against the contract (names, types, frames, encodings, stamps, nothing lost on reliable
streams); rates depend on the machine and are measured by bench/bench_contract_rates.py."""

import json

import numpy as np
import pytest

from gesim_ros.contract import messages
from gesim_ros.contract.contract import load_contract
from gesim_ros.contract.image_codec import to_compressed_msg, to_image_msg
from gesim_ros.ros.process_harness import contract_violations
from gesim_ros.tools.topic_monitor import TopicStats, camera_encoding

C = load_contract()


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["g2_gdk", "genie_sim"])
def test_external_subscriber_sees_every_sensor_topic_as_the_contract_says(procs, tmp_path, profile):
    report = tmp_path / "topics.json"
    procs.start("contract_publisher", "--ros-args", "-p", f"contract:={profile}", "-p", "camera_scale:=0.25")
    monitor = procs.start("topic_monitor", "--ros-args", "-p", f"contract:={profile}", "-p", "duration:=3.0",
                          "-p", f"json_out:={report}")
    assert monitor.process.wait(timeout=60) == 0, monitor.log()
    rows = json.loads(report.read_text())["topics"]
    assert contract_violations(rows, load_contract(profile)) == []


def monitored(key: str) -> TopicStats:
    spec = C.topic(key)
    return TopicStats(key, spec.resolve("/"), spec.type, spec.rate_hz, spec.frame_id, spec.encoding,
                      spec.qos.reliability == "reliable")


def test_the_monitor_counts_what_breaks_the_contract():
    """Each fault the wire test guards against shows in the report and is named by contract_violations."""
    depth, head, joints = monitored("head_depth"), monitored("head_color"), monitored("joint_states")
    image = np.zeros((4, 6, 3), np.uint8)
    assert camera_encoding(to_compressed_msg(image, "rgb8", "jpeg")) == "jpeg"
    assert camera_encoding(to_compressed_msg(image, "rgb8", "png")) == "png"
    assert camera_encoding(to_image_msg(np.zeros((4, 6), np.uint16), "16UC1")) == "16UC1"
    assert camera_encoding(messages.imu_msg(0.0, "imu", (0, 0, 0, 1), (0, 0, 0), (0, 0, 9.8))) is None
    depth.add(1.0, depth.expected_frame_id, 0.0, "16UC1")
    depth.add(1.0, "camera", 0.0, "32FC1")            # same stamp, another frame, another encoding
    head.add(1.0, head.expected_frame_id, 0.0, "png")
    head.add(2.0, head.expected_frame_id, 0.0, "jpeg")
    for sequence in (7, 8, 11):                        # 9 and 10 never arrived
        joints.add(float(sequence), joints.expected_frame_id, 0.0, None, sequence)
    rows = {row["key"]: row for row in (s.row(1.0) for s in (depth, head, joints))}
    assert (rows["head_depth"]["stamp_regressions"], rows["head_depth"]["wrong_frame_ids"],
            rows["head_depth"]["wrong_encodings"]) == (1, 1, 1)
    assert rows["head_color"]["wrong_encodings"] == 1 and rows["joint_states"]["lost"] == 2
    problems = contract_violations(list(rows.values()), C)
    for expected in ("/gdk/camera/head_depth: 1 of 2 message(s) with a frame id other than 'head_depth_optical_frame'",
                     "/gdk/camera/head_depth: 1 of 2 message(s) with an encoding other than '16UC1'",
                     "/gdk/camera/head_depth: 1 of 2 message(s) with a header stamp not later",
                     "/gdk/camera/head_color: 1 of 2 message(s) with an encoding other than 'jpeg'",
                     "/gdk/joint_state: reliable, yet 2 message(s) lost",
                     "/gdk/imu/chassis: not watched"):
        assert any(p.startswith(expected) for p in problems), (expected, problems)
    # On a best-effort stream a gap is not a fault; a reliable one without sequence numbers cannot be checked.
    imu, quiet = monitored("imu"), monitored("joint_states")
    for sequence in (1, 5):
        imu.add(float(sequence), imu.expected_frame_id, 0.0, None, sequence)
        quiet.add(float(sequence), quiet.expected_frame_id, 0.0, None, None)
    assert imu.row(1.0)["lost"] == 0
    assert "/gdk/joint_state: reliable, but no publication sequence numbers arrived to count losses by" in \
        contract_violations([imu.row(1.0), quiet.row(1.0)], C)

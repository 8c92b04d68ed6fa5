import copy

import pytest
import yaml

from gesim_ros.contract.contract import (
    PROFILE_DIR, ContractError, available_profiles, join_name, load_contract, parse_contract)


def test_profiles_load_with_every_contract_topic():
    assert {"g2_gdk", "genie_sim"} <= set(available_profiles())
    for profile in available_profiles():
        c = load_contract(profile)
        assert {"head_color", "hand_left_color", "hand_right_color", "head_depth", "joint_states", "imu",
                "lidar", "tactile_left", "tactile_right", "joint_command", "action_chunk"} <= set(c.topics)
        assert len(c.joint_names) == 24 and len(set(c.joint_names)) == 24
        assert [len(c.joint_groups[g]) for g in ("waist", "head", "left_arm", "right_arm")] == [5, 3, 7, 7]
        assert {c.camera_for_view(v).key for v in ("head", "left_wrist", "right_wrist")} == {
            "head_color", "hand_left_color", "hand_right_color"}


def test_default_profile_uses_the_robots_gdk_names():
    c = load_contract()
    assert c.topic("head_color").resolve(c.namespace("robot")) == "/gdk/camera/head_color"
    assert c.topic("head_color").resolve(c.namespace("world_model")) == "/gesim/world_model/gdk/camera/head_color"
    assert c.topic("joint_states").type == "sensor_msgs/msg/JointState"
    assert c.topic("head_color").qos.reliability == "best_effort"
    assert c.arm_joint_names[:7] == c.joint_groups["left_arm"]
    assert c.arm_joint_names[7:14] == c.joint_groups["right_arm"]


def test_join_name():
    assert join_name("/", "gdk/x") == "/gdk/x"
    assert join_name("/a/b/", "/gdk/x") == "/a/b/gdk/x"


def _default_data():
    return yaml.safe_load((PROFILE_DIR / "g2_gdk.yaml").read_text())


def _load_broken(tmp_path, mutate):
    data = copy.deepcopy(_default_data())
    mutate(data)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ContractError) as info:
        load_contract(path)
    message = str(info.value)
    assert str(path) in message and "Fix:" in message
    return info.value


def test_unknown_message_type_names_file_key_and_fix(tmp_path):
    err = _load_broken(tmp_path, lambda d: d["topics"]["imu"].update(type="sensor_msgs/msg/Imuu"))
    assert err.key == "topics.imu.type" and "sensor_msgs/msg/Imuu" in err.problem
    assert "sensor_msgs/msg/Imu" in err.fix


def test_duplicate_topic_name(tmp_path):
    err = _load_broken(tmp_path, lambda d: d["topics"]["lidar"].update(name=d["topics"]["imu"]["name"]))
    assert err.key == "topics.lidar.name" and "duplicate" in err.problem and "topics.imu" in err.problem


def test_missing_rate(tmp_path):
    err = _load_broken(tmp_path, lambda d: d["topics"]["head_color"].pop("rate_hz"))
    assert err.key == "topics.head_color.rate_hz"


def test_missing_qos(tmp_path):
    err = _load_broken(tmp_path, lambda d: d["topics"]["joint_states"].pop("qos"))
    assert err.key == "topics.joint_states.qos"


def test_unknown_qos_profile(tmp_path):
    err = _load_broken(tmp_path, lambda d: d["topics"]["joint_states"].update(qos="fast"))
    assert err.key == "topics.joint_states.qos" and "sensor_data" in err.fix


def test_status_topics_carry_a_liveliness_lease_that_reaches_rclpy():
    from rclpy.qos import LivelinessPolicy

    from gesim_ros.contract.contract import ros_qos
    for profile in available_profiles():
        qos = load_contract(profile).topic("backend_status").qos
        assert qos.liveliness_lease_s == 1.0
        ros = ros_qos(qos)
        assert ros.liveliness == LivelinessPolicy.AUTOMATIC and ros.liveliness_lease_duration.nanoseconds == 10**9
    assert ros_qos(load_contract().topic("joint_states").qos).liveliness == LivelinessPolicy.SYSTEM_DEFAULT


@pytest.mark.parametrize("bad", [0, -1.0, "1s", True])
def test_bad_liveliness_lease(tmp_path, bad):
    err = _load_broken(tmp_path, lambda d: d["qos_profiles"]["latched"].update(liveliness_lease_s=bad))
    assert err.key == "qos_profiles.latched.liveliness_lease_s" and "liveliness_lease_s: <seconds>" in err.fix


def test_joint_listed_twice(tmp_path):
    err = _load_broken(tmp_path, lambda d: d["joints"]["right_arm"].append("idx21_arm_l_joint1"))
    assert err.key == "joints.right_arm" and "idx21_arm_l_joint1" in err.problem and "joints.left_arm" in err.problem


def test_missing_joint_limit(tmp_path):
    err = _load_broken(tmp_path, lambda d: d["joint_limits"].pop("idx13_head_joint3"))
    assert err.key == "joint_limits.idx13_head_joint3"


def test_unknown_profile_name():
    with pytest.raises(ContractError) as info:
        load_contract("g3_robot")
    assert "g3_robot" in str(info.value) and "g2_gdk" in str(info.value)


def test_invalid_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("topics: [unclosed")
    with pytest.raises(ContractError, match="not valid YAML"):
        load_contract(path)


def test_parse_rejects_camera_without_size():
    data = _default_data()
    data["topics"]["head_color"].pop("width")
    with pytest.raises(ContractError, match="topics.head_color.width"):
        parse_contract(data, "inline")


@pytest.mark.parametrize("stamp_s, sec, nanosec", [
    (1.9999999997, 2, 0),             # rounds up to the next whole second, not back to 1.0 s
    (1.25, 1, 250_000_000),
    (1_765_000_000.5, 1_765_000_000, 500_000_000),
    (0.0, 0, 0),
])
def test_stamps_carry_a_rounded_up_fraction_into_the_seconds(stamp_s, sec, nanosec):
    from gesim_ros.contract.messages import duration_msg, seconds, time_msg
    for msg in (time_msg(stamp_s), duration_msg(stamp_s)):
        assert (msg.sec, msg.nanosec) == (sec, nanosec)
        assert seconds(msg) == pytest.approx(stamp_s, abs=1e-9 * max(1.0, stamp_s))
    late = duration_msg(-0.25)   # ROS keeps nanosec positive: -1 s + 0.75 s
    assert (late.sec, late.nanosec) == (-1, 750_000_000)

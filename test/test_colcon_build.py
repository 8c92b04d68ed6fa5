"""A ROS workstation's path: `colcon build` of the repository, then the generated interfaces and
the nodes are used from the colcon install space (here on top of the pip ROS 2 prefix)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gesim_ros.tools.real_launch import colcon_build

PREFIX = Path(sys.prefix)

CHECK = """
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


@pytest.mark.slow
def test_colcon_build_and_use_install_space(tmp_path):
    env = {**os.environ, "AMENT_PREFIX_PATH": str(PREFIX), "CMAKE_PREFIX_PATH": str(PREFIX)}
    build = colcon_build(tmp_path, env)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert "2 packages finished" in build.stdout
    install = tmp_path / "install"
    assert (install / "gesim_ros" / "lib" / "gesim_ros" / "topic_monitor").exists()
    assert (install / "gesim_ros" / "share" / "gesim_ros" / "package.xml").exists()
    use = subprocess.run(
        ["bash", "-c", f"source {install}/setup.bash && {sys.executable} -c '{CHECK}'"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert use.returncode == 0, use.stdout + use.stderr
    interfaces_file, package_file, status = use.stdout.strip().splitlines()[-3:]
    assert interfaces_file.startswith(str(install)), interfaces_file
    assert package_file.startswith(str(install)), package_file
    assert status == "roundtrip ok"

"""run_node's shutdown as a real process: a node whose ROS teardown hangs (seen in CI, in rcl's node
destruction with the GIL held) has closed what it owns first, and the process still ends, clean,
within ROS_TEARDOWN_LIMIT_S, saying where it hung."""

import signal
import subprocess
import sys
import time

from gesim_ros.ros.node_setup import ROS_TEARDOWN_LIMIT_S

# A node whose close() leaves a file behind, and rclpy's node destruction made to hang in native code
# that holds the GIL, as CI's did (libc's sleep through PyDLL): the hang is injected, the shutdown
# path around it is the one every executable's main() runs.
HANGING_NODE = """
import ctypes, sys
from pathlib import Path
from rclpy.node import Node
from gesim_ros.ros.node_setup import run_node

class Closing(Node):
    def __init__(self):
        super().__init__("teardown_hang")
        Path(sys.argv[1], "up").touch()

    def close(self):
        Path(sys.argv[1], "closed").touch()

def hang(self):
    ctypes.PyDLL(None).sleep(600)

Node.destroy_node = hang
run_node(Closing, args=[])
"""


def test_a_hanging_ros_teardown_is_left_behind_after_the_node_closed(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", HANGING_NODE, str(tmp_path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "up").exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert (tmp_path / "up").exists(), process.communicate(timeout=10)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=ROS_TEARDOWN_LIMIT_S + 30)  # liveness bound only
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stdout + stderr
    assert (tmp_path / "closed").exists()  # the node's own resources came first, unbounded
    assert "Timeout (0:00:04)!" in stderr and "in hang" in stderr, stderr  # where the teardown hung
    assert "Traceback" not in stderr, stderr


def test_exit_after_ends_the_process_with_its_status_while_native_code_holds_the_gil():
    # a 60 s sleep holding the GIL: status 3 within the 50 s bound comes from the timer alone
    run = subprocess.run([sys.executable, "-c", "import ctypes; from gesim_ros.ros.node_setup import exit_after; "
                          "exit_after(0.5, 3); ctypes.PyDLL(None).sleep(60)"], capture_output=True, timeout=50)
    assert run.returncode == 3, run.stderr


def test_a_cancelled_exit_after_leaves_the_process_alone():
    run = subprocess.run([sys.executable, "-c", "import time; from gesim_ros.ros.node_setup import exit_after; "
                          "cancel = exit_after(0.3, 3); cancel(); time.sleep(1.0); print('alive')"],
                         capture_output=True, text=True, timeout=50)
    assert run.returncode == 0 and run.stdout == "alive\n", run.stderr

"""The real `ros2 launch`, for the tests and benches that run this package's launch files as a robot
workstation does: colcon-build the package (as the README's workstation section says) and run
`ros2 launch gesim_ros FILE` from its install space.

Where no ROS 2 distribution is installed (the pip set-up), the real launch system comes from
../shared/ros2-launch (upstream sources and an install script), built on top of this venv into
build/ros2-launch. A machine with a system `ros2` uses that one.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KIT = REPO.parent / "shared" / "ros2-launch" / "install.sh"
KIT_PREFIX = REPO / "build" / "ros2-launch"


class RealLaunchUnavailable(RuntimeError):
    """Neither ../shared/ros2-launch nor a system `ros2` is here."""


def colcon_build(work: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`colcon build --base-paths . msg` of this checkout into ``work``/install (the README's
    workstation command; the root package hides msg/ from a plain colcon build)."""
    venv_colcon = Path(sys.prefix) / "bin" / "colcon"
    return subprocess.run(
        [str(venv_colcon) if venv_colcon.exists() else "colcon", "--log-base", str(work / "log"), "build", "--base-paths", ".", "msg",
         "--build-base", str(work / "build"), "--install-base", str(work / "install"),
         "--cmake-args", f"-DPython3_EXECUTABLE={sys.executable}", "-DBUILD_TESTING=OFF"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def prepare(work: Path) -> dict[str, str]:
    """The environment of a shell with `ros2 launch` and this package's fresh colcon install sourced."""
    venv = Path(sys.prefix)
    if KIT.is_file():
        KIT_PREFIX.parent.mkdir(parents=True, exist_ok=True)  # one install at a time (parallel test workers)
        installed = subprocess.run(["flock", f"{KIT_PREFIX}.lock", str(KIT), str(venv), str(KIT_PREFIX)],
                                   capture_output=True, text=True, timeout=900)
        if installed.returncode != 0:
            raise RuntimeError(f"{KIT} failed:\n{installed.stdout[-3000:]}{installed.stderr[-3000:]}")
        base = (f"export AMENT_PREFIX_PATH={venv} CMAKE_PREFIX_PATH={venv} PATH={venv}/bin:$PATH && "
                f"source {KIT_PREFIX}/setup.bash")
    elif shutil.which("ros2"):
        base = "true"
    else:
        raise RealLaunchUnavailable(f"no real ros2 launch here: neither {KIT.parent} nor a system `ros2`")
    ros_env = _sourced(base)
    built = colcon_build(work, ros_env)
    if built.returncode != 0:
        raise RuntimeError(f"colcon build failed:\n{built.stdout[-3000:]}{built.stderr[-3000:]}")
    return _sourced(f"{base} && source {work / 'install' / 'setup.bash'}")


def _sourced(script: str) -> dict[str, str]:
    dump = subprocess.run(["bash", "-c", f"{script} && env -0"], capture_output=True, timeout=120, check=True)
    return dict(item.split("=", 1) for item in dump.stdout.decode().split("\0") if "=" in item)


class LaunchProcess:
    """`ros2 launch gesim_ros FILE ARGS...` (or `ros2 launch /abs/path.launch.yaml ARGS...`) in a process
    group of its own (as a terminal runs it), its output in ``log``."""

    def __init__(self, env: dict[str, str], launch_file: str, arguments: dict[str, str], log: Path, cwd: Path):
        self.log_path = log
        where = [launch_file] if Path(launch_file).is_absolute() else ["gesim_ros", launch_file]
        command = ["ros2", "launch", *where, *(f"{k}:={v}" for k, v in arguments.items())]
        with open(log, "wb") as out:
            self.process = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout: float) -> int | None:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def interrupt(self) -> None:
        """A terminal's Ctrl-C: SIGINT to the whole process group (launch and every node)."""
        os.killpg(self.process.pid, signal.SIGINT)

    def stop(self, timeout: float = 60.0) -> None:
        """Ctrl-C, then whatever is left of the group is killed."""
        if self.process.poll() is None:
            self.interrupt()
            if self.wait(timeout) is None:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # nodes launch had not yet reaped
            try:
                os.killpg(self.process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        os.killpg(self.process.pid, signal.SIGKILL)

"""Harness for integration tests: isolated DDS, nodes as separate processes, waiting for topics.

Used by this package's tests and meant for labs' own integration tests. ``isolate_dds()`` keeps
discovery on this machine and picks a domain of its own, so parallel runs never see each other.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable


def isolate_dds(domain_id: int | None = None) -> int:
    """Keep DDS discovery on localhost and use a domain of our own (random unless given)."""
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.pop("ROS_STATIC_PEERS", None)
    if domain_id is None:
        domain_id = random.SystemRandom().randint(10, 100)
    os.environ["ROS_DOMAIN_ID"] = str(domain_id)
    return domain_id


def executable_path(name: str) -> str:
    """An installed console script: beside this Python (pip venv) or on PATH (colcon install)."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"executable '{name}' is not installed; run scripts/bootstrap.sh "
                                "(pip set-up) or source the colcon install space")
    return found


class NodeProcess:
    """One node executable in its own process group, its output in a log file."""

    def __init__(self, name: str, args: Iterable[str] = (), log_dir: Path | None = None,
                 env: dict[str, str] | None = None):
        self.name = name
        self.args = [str(a) for a in args]
        log_dir = Path(log_dir or os.environ.get("TMPDIR", "/tmp"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}-{os.getpid()}-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [executable_path(name), *self.args], stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, env={**os.environ, **(env or {})})

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        if self.running:
            os.killpg(self.process.pid, sig)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGINT (as Ctrl-C would), then SIGKILL after ``timeout``; returns the exit code."""
        if self.running:
            self.signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.process.wait(5)
        self._log.close()
        return self.process.returncode


class ProcessGroup:
    """Starts node processes and always stops all of them, even when a test fails."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.processes: list[NodeProcess] = []

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> NodeProcess:
        proc = NodeProcess(name, args, self.log_dir, env)
        self.processes.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"----- {p.name} (rc={p.process.poll()}) -----\n{p.log()[-4000:]}"
                         for p in self.processes)


def spin_until(node, condition: Callable[[], bool], timeout: float, executor=None) -> bool:
    """Spin ``node`` until ``condition()`` holds or ``timeout`` seconds pass; returns the condition."""
    import rclpy

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if executor is not None:
            executor.spin_once(timeout_sec=0.05)
        else:
            rclpy.spin_once(node, timeout_sec=0.05)
    return condition()


def collect_messages(node, topic: str, msg_type, qos, count: int, timeout: float) -> list:
    """Subscribe, spin until ``count`` messages arrived or ``timeout``, unsubscribe; returns them."""
    received: list = []
    sub = node.create_subscription(msg_type, topic, received.append, qos)
    try:
        spin_until(node, lambda: len(received) >= count, timeout)
    finally:
        node.destroy_subscription(sub)
    return received

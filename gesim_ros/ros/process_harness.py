"""Harness for integration tests: isolated DDS, nodes as separate processes, waiting for topics.

Used by this package's tests and meant for labs' own integration tests. ``isolate_dds()`` keeps
discovery on this machine and takes a domain no other run on this machine holds, so parallel runs never
see each other.
"""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable


# Valid ROS 2 domain ids on Linux are 0-101 and 215-232 (the others' DDS ports fall in the ephemeral port
# range or past 65535). 0-9 are left to people's own ROS graphs: 0 is the default, low ids are picked by hand.
DOMAIN_IDS = (*range(10, 102), *range(215, 233))
# One lock file per domain id, the same for every user and TMPDIR on this machine.
DOMAIN_LOCK_DIR = Path("/tmp/gesim_ros-ros-domain-locks")


class NoFreeDomainError(RuntimeError):
    pass


# domain id -> the descriptor whose flock holds it: open until this process exits, however it exits
# (the kernel then drops the lock). Not inherited, so node processes started with the id (they read
# ROS_DOMAIN_ID) neither hold the lock nor try to take it.
_held_domains: dict[int, int] = {}


def allocate_domain_id(lock_dir: Path = DOMAIN_LOCK_DIR, candidates: Iterable[int] = DOMAIN_IDS) -> int:
    """Hold the first free id of ``candidates`` for the life of this process; a busy id is skipped. The
    search starts at a random id, so a new run does not reuse the domain a run just left (its orphans
    may linger there)."""
    candidates = list(candidates)
    lock_dir = Path(lock_dir)
    if not lock_dir.is_dir():
        lock_dir.mkdir(parents=True, exist_ok=True)
        try:  # every user's runs share the directory, as they share the domains
            lock_dir.chmod(0o1777)
        except PermissionError:
            pass
    start = random.SystemRandom().randrange(len(candidates))
    for domain_id in candidates[start:] + candidates[:start]:
        path = lock_dir / f"{domain_id}.lock"
        try:  # read-only: flock needs no write access, so another user's lock file serves as well
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        except PermissionError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _held_domains[domain_id] = fd
        return domain_id
    raise NoFreeDomainError(
        f"no free ROS_DOMAIN_ID: all {len(candidates)} ids ({_spans(candidates)}) are held by other runs on "
        f"this machine (lock files in {lock_dir}). Fix: wait for one to finish, or end a stale one "
        f"(`fuser {lock_dir}/*.lock` lists the processes holding them)")


def _spans(ids: list[int]) -> str:
    """[10, 11, 12, 215] -> '10-12, 215'"""
    spans: list[list[int]] = []
    for i in sorted(ids):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)


_process_domain: int | None = None


def isolate_dds() -> int:
    """Keep DDS discovery on localhost and hold a domain id that no other run on this machine holds, for
    the life of this process (one per process: a second call returns the same id). Every call clears
    the domain's abandoned shared-memory ports first (:func:`clear_abandoned_shm_ports`): a graph
    restarted in the domain after a kill would otherwise hang."""
    global _process_domain
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.pop("ROS_STATIC_PEERS", None)
    if _process_domain is None:
        _process_domain = allocate_domain_id()
    os.environ["ROS_DOMAIN_ID"] = str(_process_domain)
    clear_abandoned_shm_ports(_process_domain)
    return _process_domain


# Fast DDS's shared-memory transport keeps one segment per port, /dev/shm/fastdds_port<N>, N the UDP
# port it stands for: 7400 + 250 * domain + an offset below 250. A process killed while it created one
# leaves it at 0 bytes, and a later participant of the domain that picks that port waits for it to be
# initialised forever, inside rmw_create_node (Fast DDS 3.2: a boost interprocess spin-wait); its node
# never logs a line. Measured: a rank-policies job retried after a timeout lost all its 60 episodes to it.
FASTDDS_SHM_DIR = Path("/dev/shm")
# Creating a segment and giving it its size are microseconds apart: one still empty after this is abandoned.
ABANDONED_SHM_AFTER_S = 10.0


def fastdds_ports(domain_id: int) -> range:
    """The UDP ports (and so the shared-memory port numbers) of ``domain_id``'s participants."""
    return range(7400 + 250 * domain_id, 7400 + 250 * (domain_id + 1))


def clear_abandoned_shm_ports(domain_id: int, shm_dir: Path = FASTDDS_SHM_DIR) -> list[str]:
    """Remove the empty Fast DDS port segments of ``domain_id`` older than ABANDONED_SHM_AFTER_S (their
    creators died mid-creation); returns their names. Live segments are never empty."""
    ports, removed = fastdds_ports(domain_id), []
    for path in Path(shm_dir).glob("fastdds_port*"):
        port = path.name.removeprefix("fastdds_port")
        if not port.isdigit() or int(port) not in ports:
            continue
        try:
            info = path.stat()
            if info.st_size == 0 and time.time() - info.st_mtime > ABANDONED_SHM_AFTER_S:
                path.unlink()
                removed.append(path.name)
        except (FileNotFoundError, PermissionError):
            continue  # gone meanwhile, or another user's
    return removed


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

    def logs(self, head_chars: int = 2000, tail_chars: int = 4000) -> str:
        """Every process's log: its start (where a cascade of errors usually begins) and its end."""
        return "\n".join(f"----- {p.name} (rc={p.process.poll()}) -----\n"
                         f"{head_and_tail(p.log(), head_chars, tail_chars)}" for p in self.processes)


def head_and_tail(text: str, head_chars: int, tail_chars: int) -> str:
    """``text`` whole when short, else its first and last characters with a count of those left out."""
    if len(text) <= head_chars + tail_chars:
        return text
    left_out = len(text) - head_chars - tail_chars
    return f"{text[:head_chars]}\n[... {left_out} characters left out ...]\n{text[-tail_chars:]}"


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


def call_answered(node, client, request, timeout: float, attempts: int = 3):
    """The service's response, the request asked again when unanswered after ``timeout`` seconds: a
    service can count the client's request reader before its response writer matches the client, and
    DDS then drops the answer ("failed to send response (timeout)"). Raises AssertionError after ``attempts``."""
    for _ in range(attempts):
        future = client.call_async(request)
        if spin_until(node, future.done, timeout):
            return future.result()
        client.remove_pending_request(future)
    raise AssertionError(f"{client.srv_name} did not answer {attempts} requests of {timeout:g} s each")


def collect_messages(node, topic: str, msg_type, qos, count: int, timeout: float) -> list:
    """Subscribe, spin until ``count`` messages arrived or ``timeout``, unsubscribe; returns them."""
    received: list = []
    sub = node.create_subscription(msg_type, topic, received.append, qos)
    try:
        spin_until(node, lambda: len(received) >= count, timeout)
    finally:
        node.destroy_subscription(sub)
    return received


def contract_violations(rows: list[dict], contract, namespace: str = "/") -> list[str]:
    """What a topic_monitor report (its JSON ``topics``) shows wrong against ``contract`` for the sensor
    topics under ``namespace``: a topic missing or arriving fewer than twice, under another name or
    type, with a wrong frame id or camera encoding, a header stamp not later than the one before, a
    message lost on a reliable stream (or no sequence numbers to tell). Rates are not judged here:
    they depend on the machine (bench/ measures them)."""
    by_key = {row["key"]: row for row in rows}
    problems = []
    for spec in contract.topics_with_role("sensor"):
        topic = spec.resolve(namespace)
        row = by_key.pop(spec.key, None)
        if row is None:
            problems.append(f"{topic}: not watched")
            continue
        if (row["topic"], row["type"]) != (topic, spec.type):
            problems.append(f"{topic}: watched as {row['topic']} ({row['type']}), the contract says {spec.type}")
        if row["count"] < 2:
            problems.append(f"{topic}: {row['count']} message(s) arrived, too few to check their stamps")
        for count, what in ((row["wrong_frame_ids"], f"a frame id other than '{spec.frame_id}'"),
                            (row["wrong_encodings"], f"an encoding other than '{spec.encoding}'"),
                            (row["stamp_regressions"], "a header stamp not later than the one before")):
            if count:
                problems.append(f"{topic}: {count} of {row['count']} message(s) with {what}")
        if row["reliable"] and row["last_sequence"] is None:
            problems.append(f"{topic}: reliable, but no publication sequence numbers arrived to count losses by")
        elif row["reliable"] and row["lost"]:
            problems.append(f"{topic}: reliable, yet {row['lost']} message(s) lost")
    problems += [f"{row['topic']}: watched, but not a sensor topic of the contract" for row in by_key.values()]
    return problems

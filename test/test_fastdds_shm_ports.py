"""Abandoned Fast DDS shared-memory ports (gesim_ros.ros.process_harness.clear_abandoned_shm_ports): a
process killed while it created /dev/shm/fastdds_port<N> leaves it empty, and the next node of that
domain hangs in rmw_create_node. Once on files alone, then with real node processes."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time

import pytest

from gesim_ros.ros.process_harness import ABANDONED_SHM_AFTER_S, DOMAIN_IDS, FASTDDS_SHM_DIR, allocate_domain_id, \
    clear_abandoned_shm_ports, fastdds_ports


def _segment(folder, port: int, size: int = 0, age_s: float = 0.0):
    path = folder / f"fastdds_port{port}"
    path.write_bytes(b"\0" * size)
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return path


def test_only_old_empty_segments_of_the_domain_are_removed(tmp_path):
    base = fastdds_ports(42).start
    abandoned = _segment(tmp_path, base + 11, age_s=ABANDONED_SHM_AFTER_S + 5)
    being_created = _segment(tmp_path, base + 13)                                  # empty, but just now
    live = _segment(tmp_path, base + 15, size=64, age_s=3600)
    other_domain = _segment(tmp_path, fastdds_ports(43).start + 11, age_s=3600)
    companions = [tmp_path / f"fastdds_port{base + 11}_el", tmp_path / f"sem.fastdds_port{base + 11}_mutex"]
    for path in companions:
        path.write_bytes(b"")
    assert clear_abandoned_shm_ports(42, tmp_path) == [abandoned.name]
    assert not abandoned.exists()
    assert all(p.exists() for p in (being_created, live, other_domain, *companions))


# Prints once rclpy is imported and again once its node exists: which of the two it reached says where it hangs.
NODE = """
import rclpy
print("imported", flush=True)
rclpy.init()
rclpy.create_node("shm_probe")
print("up", flush=True)
"""


def _plant_port_mutex(port: int) -> None:
    """The named semaphore Fast DDS creates beside a port segment (/dev/shm/sem.fastdds_port<N>_mutex):
    with it present the port counts as one in use, which Fast DDS opens rather than recreates, as it
    found the segment a killed process left."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sem_open.restype = ctypes.c_void_p
    sem = libc.sem_open(f"/fastdds_port{port}_mutex".encode(), os.O_CREAT, 0o644, 1)
    assert sem not in (None, ctypes.c_void_p(-1).value), f"sem_open: errno {ctypes.get_errno()}"
    libc.sem_close(ctypes.c_void_p(sem))


def _start_node(domain: int) -> subprocess.Popen:
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    return subprocess.Popen([sys.executable, "-c", NODE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _lines_within(proc: subprocess.Popen, seconds: float) -> list[str]:
    try:
        out, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out.split()


@pytest.mark.slow
@pytest.mark.skipif(not FASTDDS_SHM_DIR.is_dir(), reason="no /dev/shm: Fast DDS's shared-memory transport is off")
def test_a_node_hangs_on_an_abandoned_port_and_starts_once_it_is_cleared():
    # A domain no earlier run left segments in: a node takes a valid segment it finds over a planted one.
    unused = [d for d in DOMAIN_IDS if not any(FASTDDS_SHM_DIR.glob(f"fastdds_port{fastdds_ports(d).start + 11}*"))]
    if not unused:
        pytest.skip("every domain has Fast DDS segments of earlier runs in /dev/shm")
    domain = allocate_domain_id(candidates=unused)   # held by this test process: no other run uses it meanwhile
    base = fastdds_ports(domain).start
    ports = [port for port in range(base + 11, base + 41, 2)   # the user ports of the first participants
             if not (FASTDDS_SHM_DIR / f"fastdds_port{port}").exists()]
    planted = [_segment(FASTDDS_SHM_DIR, port, age_s=ABANDONED_SHM_AFTER_S + 5) for port in ports]
    mutexes = [port for port in ports if not (FASTDDS_SHM_DIR / f"sem.fastdds_port{port}_mutex").exists()]
    for port in mutexes:
        _plant_port_mutex(port)
    try:
        hung = _lines_within(_start_node(domain), 25.0)
        assert hung == ["imported"], f"expected a node stuck in rmw_create_node, got {hung}"
        removed = clear_abandoned_shm_ports(domain)
        assert set(removed) >= {p.name for p in planted}
        assert _lines_within(_start_node(domain), 120.0) == ["imported", "up"]
    finally:
        for path in [*planted, *(FASTDDS_SHM_DIR / f"sem.fastdds_port{port}_mutex" for port in mutexes)]:
            path.unlink(missing_ok=True)

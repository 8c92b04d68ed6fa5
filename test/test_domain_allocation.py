"""ROS_DOMAIN_ID allocation (gesim_ros.ros.process_harness): runs on one machine never share a domain. Plain Python:
each holder is a separate process, as parallel test runs are."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from conftest import DOMAIN_ID
from gesim_ros.ros.process_harness import DOMAIN_IDS, DOMAIN_LOCK_DIR, NoFreeDomainError, allocate_domain_id

# Holds the ids it is asked for (each a separate allocation) until its stdin closes or it is killed.
HOLDER = """
import sys
from gesim_ros.ros.process_harness import allocate_domain_id
lock_dir, count, candidates = sys.argv[1], int(sys.argv[2]), [int(i) for i in sys.argv[3:]]
print(*(allocate_domain_id(lock_dir, candidates) for _ in range(count)), flush=True)
sys.stdin.read()
"""


def start_holder(lock_dir, candidates, count=1) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_dir), str(count), *map(str, candidates)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def held_ids(holder: subprocess.Popen) -> list[int]:
    line = holder.stdout.readline()
    assert line, holder.communicate()[1]
    return [int(i) for i in line.split()]


def stop(holder: subprocess.Popen) -> None:
    holder.kill()
    holder.wait(10)


def test_concurrent_runs_get_different_ids(tmp_path):
    candidates = [41, 42, 43, 44]
    holders = [start_holder(tmp_path, candidates) for _ in candidates]   # all allocate at once
    try:
        ids = [held_ids(h)[0] for h in holders]
    finally:
        for h in holders:
            stop(h)
    assert sorted(ids) == candidates


def test_an_id_is_free_again_once_its_holder_is_killed(tmp_path):
    holder = start_holder(tmp_path, [57])
    try:
        assert held_ids(holder) == [57]
        with pytest.raises(NoFreeDomainError):
            allocate_domain_id(tmp_path, [57])
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    assert allocate_domain_id(tmp_path, [57]) == 57


def test_every_id_taken_is_a_clear_error(tmp_path):
    holder = start_holder(tmp_path, [20, 21, 22, 230], count=4)
    try:
        assert sorted(held_ids(holder)) == [20, 21, 22, 230]
        with pytest.raises(NoFreeDomainError) as error:
            allocate_domain_id(tmp_path, [20, 21, 22, 230])
    finally:
        stop(holder)
    message = str(error.value)
    assert "no free ROS_DOMAIN_ID: all 4 ids (20-22, 230) are held by other runs" in message
    assert str(tmp_path) in message and "Fix: wait for one to finish" in message


def test_this_test_session_holds_its_domain():
    """conftest's domain is locked: another run looking for a free id among it alone finds none, and the
    id is in ROS_DOMAIN_ID for the nodes the tests start."""
    probe = start_holder(DOMAIN_LOCK_DIR, [DOMAIN_ID])
    _, stderr = probe.communicate(timeout=30)
    assert probe.returncode != 0 and "NoFreeDomainError: no free ROS_DOMAIN_ID" in stderr, stderr
    assert os.environ["ROS_DOMAIN_ID"] == str(DOMAIN_ID) and DOMAIN_ID in DOMAIN_IDS

"""Two processes exchange every custom interface and every contract message type over DDS."""

import subprocess
import sys
from pathlib import Path

import pytest
from rclpy.qos import QoSDurabilityPolicy, QoSProfile

from gesim_ros.contract.contract import KNOWN_MESSAGE_TYPES, KNOWN_SERVICE_TYPES, load_contract, message_class
from gesim_ros.ros.process_harness import call_answered, spin_until

from dds_peer import sample, topic_for


@pytest.fixture
def peer():
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("dds_peer.py"))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_every_contract_type_is_known():
    for profile in ("g2_gdk", "genie_sim"):
        assert {t.type for t in load_contract(profile).topics.values()} <= KNOWN_MESSAGE_TYPES


def test_every_message_type_crosses_processes(peer, ros_node):
    received = {}
    qos = QoSProfile(depth=1, durability=QoSDurabilityPolicy.TRANSIENT_LOCAL)
    for t in KNOWN_MESSAGE_TYPES:
        ros_node.create_subscription(message_class(t), topic_for(t), lambda m, t=t: received.setdefault(t, m), qos)
    ok = spin_until(ros_node, lambda: len(received) == len(KNOWN_MESSAGE_TYPES), timeout=30)
    assert ok, f"missing: {sorted(KNOWN_MESSAGE_TYPES - set(received))}; peer said: {peer.stdout.read1() if peer.poll() is not None else ''}"
    for t, msg in received.items():
        assert msg == sample(t), t


def test_every_service_type_answers_across_processes(peer, ros_node):
    for t in sorted(KNOWN_SERVICE_TYPES):
        cls = message_class(t)
        client = ros_node.create_client(cls, "/dds_test/" + t.split("/")[-1])
        assert client.wait_for_service(timeout_sec=20), t
        request = cls.Request()
        if hasattr(request, "seed"):
            request.seed = 42
        response = call_answered(ros_node, client, request, timeout=10)
        text = getattr(response, "reason", "") or getattr(response, "message", "")
        assert "peer saw" in text, (t, response)

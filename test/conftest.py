"""Test session isolation: DDS stays on localhost in a domain of this session's own; node processes
started through `procs` are always stopped, and their logs are shown when a test fails."""

import pytest

from gesim_ros.ros.process_harness import ProcessGroup, isolate_dds

DOMAIN_ID = isolate_dds()  # before anything imports rclpy


@pytest.fixture
def ros_node():
    import rclpy

    rclpy.init()
    node = rclpy.create_node("gesim_test_observer")
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


@pytest.fixture
def procs(tmp_path, request):
    group = ProcessGroup(tmp_path / "logs")
    yield group
    group.stop_all()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(group.logs())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)

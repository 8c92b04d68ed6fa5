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


# The longest files (a few minutes each on 2 cores), started first so that, with one file per worker
# at a time, the short ones fill in around them instead of one long file ending the run alone.
LONGEST_FIRST = ("test_ros2_launch.py", "test_rank_policies.py", "test_lab_run_gesim_v2.py",
                 "test_lab_integration.py", "test_replay_shadow.py")


def pytest_collection_modifyitems(items):
    """The longest files, then the other files with slow tests, then the rest (each in file order)."""
    slow_files = {item.path.name for item in items if item.get_closest_marker("slow")}

    def rank(item):
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST) + (name not in slow_files)

    items.sort(key=rank)


_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Sum setup, call and teardown per test file (on the controller, also under xdist)."""
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    """Every run ends with each file's time, slowest first, so the next slow test is seen when it lands."""
    if not _FILE_SECONDS:
        return
    terminalreporter.section("seconds per test file (setup + call + teardown)")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:8.1f}  {path}")

"""What a failed node test prints of each process's log (gesim_ros.ros.process_harness): the start, where
the first of a cascade of errors is, and the end. Plain Python."""

from gesim_ros.ros.process_harness import head_and_tail


def test_a_short_log_is_shown_whole():
    assert head_and_tail("first\nlast\n", 20, 20) == "first\nlast\n"


def test_a_long_log_keeps_its_first_and_last_lines_and_says_how_much_is_left_out():
    log = "first rejection\n" + "same warning\n" * 1000 + "timeout\n"
    shown = head_and_tail(log, 16, 8)
    assert shown == f"first rejection\n\n[... {len(log) - 24} characters left out ...]\ntimeout\n"

"""The command lines: every `gesim-ros` subcommand builds its parser and prints its help, and bad input,
to `gesim-ros` or to a node executable, is refused at start as a real process: exit status 2, one line
naming the input, what is wrong and the fix, no traceback, nothing started."""

import signal
import subprocess

import pytest

from gesim_ros.cli import SUBCOMMANDS, build_parser
from gesim_ros.ros.process_harness import executable_path


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_subcommand_prints_its_help(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser([name]).parse_args([name, "--help"])
    assert exit_info.value.code == 0
    assert name in capsys.readouterr().out


def refusal(*command: str) -> str:
    """Run ``command`` and return its one-line refusal (stderr), after checking how it ended."""
    run = subprocess.Popen([executable_path(command[0]), *command[1:]], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # it did not refuse: Ctrl-C, so that lab-run stops what it started
        run.send_signal(signal.SIGINT)
        stdout, stderr = run.communicate(timeout=120)
        pytest.fail(f"{' '.join(command)} was not refused at start:\n{stdout[-2000:]}{stderr[-2000:]}")
    output = stdout + stderr
    assert run.returncode == 2, output
    assert "Traceback" not in output, output
    lines = stderr.splitlines()
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize("options, expected", [
    (["--world-model", "learnd"], ["--world-model learnd", "no world-model backend", "learned", "kinematic"]),
    (["--failure-rate", "1.5"], ["--failure-rate 1.5", "[0, 1]"]),
    (["--failure-rate", "-0.1"], ["--failure-rate -0.1", "[0, 1]"]),
])
@pytest.mark.parametrize("command", ["lab-run", "shadow-run"])
def test_lab_run_refuses_bad_options_before_starting_anything(command, options, expected, tmp_path):
    out = tmp_path / "run"
    line = refusal("gesim-ros", command, *options, "--out", str(out))
    assert line.startswith(f"gesim-ros {command}: "), line
    for text in expected:
        assert text in line, line
    assert not out.exists()  # no run folder: no process of the graph was started


@pytest.mark.parametrize("executable, parameters, expected", [
    ("backend_switch", ["mode:=robot"], ["parameter mode", "'robot'", "use one of real"]),
    ("backend_switch", ["armed:=maybe"], ["'armed'", "'maybe'", "BOOL"]),
    ("world_model", ["mode:=world_model", "initial_observation:={tmp}/missing"],
     ["initial_observation", "missing does not exist", "Fix:"]),
    ("world_model", ["mode:=world_model", "initial_observation:={tmp}/empty"],
     ["initial_observation", "empty holds no EpisodeRecord .npz", "Fix:"]),
    ("world_model", ["backend:=learnd"], ["unknown world model 'learnd'", "learned"]),
    ("g2_twin", ["task:=wipe"], ["unknown task 'wipe'", "pick_place"]),
    ("episode_runner", ["tasks:=[push]", "episode_timeout_s:=soon"], ["'episode_timeout_s'", "DOUBLE"]),
])
def test_a_node_refuses_a_bad_parameter_in_one_line(executable, parameters, expected, tmp_path):
    (tmp_path / "empty").mkdir()  # a folder without any recorded episode start
    arguments = [a for p in parameters for a in ("-p", p.format(tmp=tmp_path))]
    line = refusal(executable, "--ros-args", *arguments)
    assert line.startswith(f"{executable}: "), line
    for text in expected:
        assert text in line, line

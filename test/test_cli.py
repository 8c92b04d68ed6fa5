"""The `gesim-ros` command line: every subcommand builds its parser and prints its help."""

import pytest

from gesim_ros.cli import SUBCOMMANDS, build_parser


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_subcommand_prints_its_help(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser([name]).parse_args([name, "--help"])
    assert exit_info.value.code == 0
    assert name in capsys.readouterr().out

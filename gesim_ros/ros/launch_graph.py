"""Read this package's YAML launch files without `ros2 launch`, to check them and to run them.

The files in launch/ are ROS 2 YAML launch files (launch_yaml frontend) for `ros2 launch` on a
workstation. Where launch is not installed (the pip set-up), this module reads the same files and
starts the same node executables with the same parameter files, so both paths run one graph.
Supported: `arg` (name, default, description, `choice` entries), `node` (pkg, exec, name, namespace,
param entries with `from` or `name`/`value`), `include` (file, arg entries), `if`/`unless` on nodes and
includes, and the substitutions `$(var NAME)`, `$(find-pkg-share gesim_ros)`, `$(env NAME [default])`
and `$(equals A B)` (nested ones are resolved innermost first, as launch does).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

PACKAGE = "gesim_ros"
# Innermost first: a substitution whose arguments hold another one matches once that is resolved.
_SUBST = re.compile(r"\$\(([^\s()]+)(?:\s+([^()]*))?\)")


class LaunchFileError(ValueError):
    """A launch file uses something this reader does not know, or lacks an argument."""


@dataclass
class LaunchArg:
    name: str
    default: str | None
    description: str = ""
    choices: tuple[str, ...] = ()  # the values the argument accepts; empty: any


@dataclass
class LaunchNode:
    package: str
    executable: str
    name: str
    namespace: str = ""
    param_files: list[Path] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)

    def command(self) -> list[str]:
        """The node's command line after its executable, as `ros2 launch` would pass it."""
        args = ["--ros-args", "-r", f"__node:={self.name}"]
        if self.namespace:
            args += ["-r", f"__ns:={self.namespace}"]
        for path in self.param_files:
            args += ["--params-file", str(path)]
        for key, value in self.params.items():
            args += ["-p", f"{key}:={value}"]
        return args


def package_share() -> Path:
    """gesim_ros's share folder: the source checkout in a pip (editable) set-up, else the colcon
    install's (found through the ament index)."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "package.xml").is_file() and (checkout / "launch").is_dir():
        return checkout
    from ament_index_python.packages import get_package_share_directory
    return Path(get_package_share_directory(PACKAGE))


def launch_files() -> list[Path]:
    return sorted((package_share() / "launch").glob("*.launch.yaml"))


def read_args(path: Path) -> list[LaunchArg]:
    return [LaunchArg(a["name"], None if a.get("default") is None else str(a["default"]), a.get("description", ""),
                      tuple(str(c["value"]) for c in a.get("choice", [])))
            for a in (e["arg"] for e in _entries(path) if "arg" in e)]


def load_launch(path: Path, arguments: dict[str, str] | None = None) -> list[LaunchNode]:
    """The nodes a launch file starts for ``arguments`` (missing ones take their defaults)."""
    path = Path(path)
    declared = read_args(path)
    values = {a.name: a.default for a in declared}
    unknown = set(arguments or {}) - set(values)
    if unknown:
        raise LaunchFileError(f"{path.name}: unknown argument(s) {sorted(unknown)}; it takes {sorted(values)}")
    values.update({k: str(v) for k, v in (arguments or {}).items()})
    missing = [k for k, v in values.items() if v is None]
    if missing:
        raise LaunchFileError(f"{path.name}: argument(s) {missing} have no default; pass them as name:=value")
    for arg in declared:
        if arg.choices and values[arg.name] not in arg.choices:
            raise LaunchFileError(f"{path.name}: {arg.name}:={values[arg.name]} is not a valid value; "
                                  f"pass {arg.name}:= one of {', '.join(arg.choices)}")
    nodes = []
    for entry in _entries(path):
        (kind, body), = entry.items()
        if kind == "arg":
            continue
        if kind not in ("node", "include"):
            raise LaunchFileError(f"{path.name}: '{kind}' entries are not supported here; use arg, node, include")
        sub = lambda text: _substitute(str(text), values, path)
        if "if" in body and not _truthy(sub(body["if"])):
            continue
        if "unless" in body and _truthy(sub(body["unless"])):
            continue
        if kind == "include":
            nodes += load_launch(Path(sub(body["file"])), {a["name"]: sub(a["value"]) for a in body.get("arg", [])})
            continue
        node = LaunchNode(package=body["pkg"], executable=body["exec"], name=body.get("name", body["exec"]),
                          namespace=sub(body.get("namespace", "")))
        for param in body.get("param", []):
            if "from" in param:
                node.param_files.append(Path(sub(param["from"])))
            else:
                node.params[param["name"]] = sub(param["value"])
        nodes.append(node)
    return nodes


def param_file_names(path: Path, node_name: str) -> dict[str, object]:
    """Parameters a ROS 2 parameter file sets for ``node_name`` (its own section and `/**`)."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    found: dict[str, object] = {}
    for key in ("/**", node_name, "/" + node_name):
        found.update((data.get(key) or {}).get("ros__parameters", {}))
    return found


def _entries(path: Path) -> list[dict]:
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("launch"), list):
        raise LaunchFileError(f"{path}: not a YAML launch file (expected a top-level 'launch:' list)")
    return data["launch"]


def _substitute(text: str, values: dict[str, str], path: Path) -> str:
    def one(match: re.Match) -> str:
        kind, arg = match.group(1), (match.group(2) or "").strip()
        if kind == "var":
            if arg not in values:
                raise LaunchFileError(f"{path.name}: $(var {arg}) names no declared argument")
            return values[arg]
        if kind == "find-pkg-share":
            if arg != PACKAGE:
                raise LaunchFileError(f"{path.name}: $(find-pkg-share {arg}) is outside this package")
            return str(package_share())
        if kind == "env":
            name, _, default = arg.partition(" ")
            return os.environ.get(name, default)
        if kind == "equals":
            operands = arg.split()
            if len(operands) != 2:
                raise LaunchFileError(f"{path.name}: $(equals {arg}) needs exactly two operands")
            return str(operands[0] == operands[1]).lower()
        raise LaunchFileError(f"{path.name}: substitution $({kind}) is not supported here")
    previous = None
    while previous != text:  # arguments may themselves hold substitutions
        previous, text = text, _SUBST.sub(one, text)
    return text


def _truthy(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false", "1", "0"):
        raise LaunchFileError(f"condition value '{text}' is not true/false")
    return value in ("true", "1")

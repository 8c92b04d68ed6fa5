"""Read this package's YAML launch files without `ros2 launch`, to check them and to run them.

The files in launch/ are ROS 2 YAML launch files (launch_yaml frontend) for `ros2 launch` on a
workstation. Where launch is not installed (the pip set-up), this module reads the same files and
starts the same node executables with the same parameters, so both paths run one graph. It follows
the real launch system (ros2/launch 3.7, launch_ros 0.28), checked against it case by case in
test/test_ros2_launch.py:

* launch configurations are global: an include's arguments and an included file's defaults stay set
  for everything after the include (launch does not scope YAML includes), and an argument already set
  (on the command line, or by an earlier include) wins over a declared default;
* a parameter's plain value keeps its YAML type (``"[shadow]"`` stays a string, ``[shadow]`` is a list);
  a value holding substitutions is typed as YAML after substitution, as launch_ros does;
* substitutions are parsed once (their output is never expanded again): ``$(var NAME)``,
  ``$(find-pkg-share PKG)`` (through the ament index; the source checkout for gesim_ros in a pip
  set-up), ``$(env NAME [DEFAULT])`` (an error when unset without a default) and ``$(equals A B)``
  (``1``/``true`` and ``1.0``/``1`` compare equal; an operand may be empty).

Stricter than launch on purpose, where launch goes on without a word: an argument that no file of
the graph declares, one an include passes that the included file does not declare, and a command-line
argument an include would replace with another value are errors here.
Supported entries: ``arg`` (name, default, description, ``choice``), ``node`` (pkg, exec, name,
namespace, param entries with ``from`` or ``name``/``value``, output, on_exit, if/unless) and
``include`` (file, arg entries, if/unless).
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

PACKAGE = "gesim_ros"
NODE_KEYS = {"pkg", "exec", "name", "namespace", "param", "output", "on_exit", "if", "unless"}
INCLUDE_KEYS = {"file", "arg", "if", "unless"}


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
    params: dict[str, object] = field(default_factory=dict)  # typed as launch_ros types them
    output: str = ""
    on_exit: str = ""

    def command(self) -> list[str]:
        """The node's command line after its executable, as `ros2 launch` passes it: the ``from``
        files, then the name/value parameters in a parameter file of their own."""
        args = ["--ros-args", "-r", f"__node:={self.name}"]
        if self.namespace:
            args += ["-r", f"__ns:={self.namespace}"]
        for path in self.param_files:
            args += ["--params-file", str(path)]
        if self.params:
            with tempfile.NamedTemporaryFile("w", prefix="launch_params_", suffix=".yaml", delete=False) as f:
                yaml.safe_dump({"/**": {"ros__parameters": self.params}}, f)
            args += ["--params-file", f.name]
        return args


def package_share(package: str = PACKAGE) -> Path:
    """A package's share folder through the ament index, as `$(find-pkg-share)` finds it; gesim_ros
    in a pip (editable) set-up, which no ament index lists, is its source checkout."""
    from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

    try:
        return Path(get_package_share_directory(package))
    except (PackageNotFoundError, OSError):  # OSError: no AMENT_PREFIX_PATH at all
        checkout = Path(__file__).resolve().parents[2]
        if package == PACKAGE and (checkout / "package.xml").is_file() and (checkout / "launch").is_dir():
            return checkout
        raise LaunchFileError(f"$(find-pkg-share {package}): no package '{package}' in the ament index "
                              f"(AMENT_PREFIX_PATH={os.environ.get('AMENT_PREFIX_PATH', '')!r}); source the "
                              "install space that holds it") from None


def launch_files() -> list[Path]:
    return sorted((package_share() / "launch").glob("*.launch.yaml"))


def read_args(path: Path) -> list[LaunchArg]:
    return [LaunchArg(a["name"], None if a.get("default") is None else str(a["default"]), a.get("description", ""),
                      tuple(str(c["value"]) for c in a.get("choice", [])))
            for a in (e["arg"] for e in _entries(path) if "arg" in e)]


def load_launch(path: Path, arguments: dict[str, str] | None = None) -> list[LaunchNode]:
    """The nodes a launch file starts for ``arguments`` (name -> value, as `name:=value` on the
    command line; missing ones take their defaults)."""
    path = Path(path)
    configurations = {k: str(v) for k, v in (arguments or {}).items()}
    declared: set[str] = set()
    nodes = _visit(path, configurations, declared, given=set(configurations))
    unknown = sorted(set(arguments or {}) - declared)
    if unknown:
        raise LaunchFileError(f"{path.name}: unknown argument(s) {unknown}; it takes {sorted(declared)}")
    return nodes


def param_file_names(path: Path, node_name: str) -> dict[str, object]:
    """Parameters a ROS 2 parameter file sets for ``node_name`` (its own section and `/**`)."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    found: dict[str, object] = {}
    for key in ("/**", node_name, "/" + node_name):
        found.update((data.get(key) or {}).get("ros__parameters", {}))
    return found


# ---------------------------------------------------------------------------- the launch description


def _visit(path: Path, configurations: dict[str, str], declared: set[str], given: set[str]) -> list[LaunchNode]:
    """Execute one file's entries in order, as launch does, into ``configurations`` (``given``: the
    arguments of the command line, which an include must not silently change)."""
    nodes = []

    def sub(value):
        return _substitute(value, configurations, path)

    for entry in _entries(path):
        (kind, body), = entry.items()
        if kind == "arg":
            _declare(body, configurations, path)
            declared.add(body["name"])
            continue
        if kind not in ("node", "include"):
            raise LaunchFileError(f"{path.name}: '{kind}' entries are not supported here; use arg, node, include")
        unsupported = set(body) - (NODE_KEYS if kind == "node" else INCLUDE_KEYS)
        if unsupported:
            raise LaunchFileError(f"{path.name}: {kind} attribute(s) {sorted(unsupported)} are not supported here")
        if "if" in body and not _truthy(sub(body["if"]), path):
            continue
        if "unless" in body and _truthy(sub(body["unless"]), path):
            continue
        if kind == "include":
            included = Path(sub(body["file"]))
            passed = {a["name"]: sub(a["value"]) for a in body.get("arg", [])}
            undeclared = sorted(set(passed) - {a.name for a in read_args(included)})
            if undeclared:
                raise LaunchFileError(f"{path.name}: the include of {included.name} passes {undeclared}, which "
                                      f"{included.name} does not declare")
            overridden = sorted(k for k in given & set(passed) if passed[k] != configurations[k])
            if overridden:
                raise LaunchFileError(
                    f"{path.name}: {', '.join(f'{k}:={configurations[k]}' for k in overridden)} would be replaced by "
                    f"the include of {included.name} ({', '.join(f'{k}:={passed[k]}' for k in overridden)}): "
                    f"{path.name} does not pass that argument through; leave it out or change {path.name}")
            configurations.update(passed)  # not scoped: they stay set after the include, as in launch
            nodes += _visit(included, configurations, declared, given)
            continue
        node = LaunchNode(package=body["pkg"], executable=body["exec"], name=body.get("name", body["exec"]),
                          namespace=sub(body.get("namespace", "")), output=sub(body.get("output", "")),
                          on_exit=sub(body.get("on_exit", "")))
        for param in body.get("param", []):
            if "from" in param:
                node.param_files.append(Path(sub(param["from"])))
            else:
                node.params[param["name"]] = _parameter_value(param["name"], param["value"], configurations, path)
        nodes.append(node)
    return nodes


def _declare(body: dict, configurations: dict[str, str], path: Path) -> None:
    name = body["name"]
    if name not in configurations:
        if body.get("default") is None:
            raise LaunchFileError(f"{path.name}: argument {name} has no default; pass it as {name}:=VALUE")
        configurations[name] = _substitute(body["default"], configurations, path)
    choices = [str(c["value"]) for c in body.get("choice", [])]
    if choices and configurations[name] not in choices:
        raise LaunchFileError(f"{path.name}: {name}:={configurations[name]} is not a valid value; "
                              f"pass {name}:= one of {', '.join(choices)}")


def _parameter_value(name: str, raw, configurations: dict[str, str], path: Path):
    """A name/value parameter as launch_ros passes it: a plain YAML value as it is; a string holding
    substitutions, substituted, then read as YAML (bool, int, float, str, or a uniform list)."""
    if isinstance(raw, (bool, int, float)):
        return raw
    if isinstance(raw, list):
        if not raw or any(type(item) is not type(raw[0]) or isinstance(item, (list, dict)) for item in raw):
            raise LaunchFileError(f"{path.name}: parameter {name}: a list value must be non-empty, of one type")
        if any(isinstance(item, str) and _parse(item) != [item] for item in raw):
            raise LaunchFileError(f"{path.name}: parameter {name}: substitutions inside a list are not supported "
                                  "here; substitute the whole value, e.g. value: $(var NAME)")
        return raw
    if not isinstance(raw, str):
        raise LaunchFileError(f"{path.name}: parameter {name}: a {type(raw).__name__} value is not supported here")
    if _parse(raw) == [raw]:  # no substitution: launch passes the text as a string
        return raw
    text = _substitute(raw, configurations, path)
    try:
        value = yaml.safe_load(text) if text else ""
    except yaml.YAMLError as exc:
        raise LaunchFileError(f"{path.name}: parameter {name}: '{text}' is not YAML ({exc}); quote a string "
                              "value inside the substitution's quotes, e.g. \"'$(var NAME)'\"") from None
    if isinstance(value, list):
        if not value or any(type(item) is not type(value[0]) or isinstance(item, (list, dict)) for item in value):
            raise LaunchFileError(f"{path.name}: parameter {name}: '{text}' must be a non-empty list of one type")
        return value
    if value is None or isinstance(value, dict):
        raise LaunchFileError(f"{path.name}: parameter {name}: '{text}' is not a bool, number, string or list")
    return value


def _entries(path: Path) -> list[dict]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise LaunchFileError(f"launch file {path} does not exist") from None
    if not isinstance(data, dict) or not isinstance(data.get("launch"), list):
        raise LaunchFileError(f"{path}: not a YAML launch file (expected a top-level 'launch:' list)")
    return data["launch"]


def _truthy(text: str, path: Path) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false", "1", "0"):
        raise LaunchFileError(f"{path.name}: condition value '{text}' is not true/false/1/0")
    return value in ("true", "1")


# ---------------------------------------------------------------------------- substitutions

# Parsed text: a list of literal strings and (name, [argument, ...]) pairs, each argument parsed text.


def _parse(text: str) -> list:
    parts, pos = _parse_until(text, 0, None)
    return parts


def _parse_until(text: str, pos: int, stop: str | None) -> tuple[list, int]:
    """Parse from ``pos`` until ``stop`` (None: the end; ' or \": that quote; ' ': an unquoted
    argument, ended by whitespace or ')'); returns the parts and the position after them."""
    parts: list = []
    literal = ""
    while pos < len(text):
        char = text[pos]
        if stop == " " and (char.isspace() or char == ")"):
            break
        if stop in ("'", '"') and char == stop:
            pos += 1
            break
        if text.startswith("$(", pos):
            if literal:
                parts.append(literal)
                literal = ""
            substitution, pos = _parse_substitution(text, pos + 2)
            parts.append(substitution)
            continue
        literal += char
        pos += 1
    else:
        if stop in ("'", '"'):
            raise LaunchFileError(f"unterminated quote in '{text}'")
    if literal:
        parts.append(literal)
    return parts, pos


def _parse_substitution(text: str, pos: int) -> tuple[tuple[str, list], int]:
    start = pos
    while pos < len(text) and not text[pos].isspace() and text[pos] != ")":
        pos += 1
    name = text[start:pos]
    arguments = []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            raise LaunchFileError(f"unterminated substitution $({name} ...) in '{text}'")
        if text[pos] == ")":
            return (name, arguments), pos + 1
        if text[pos] in ("'", '"'):
            argument, pos = _parse_until(text, pos + 1, text[pos])
        else:
            argument, pos = _parse_until(text, pos, " ")
        arguments.append(argument)


def _substitute(value, configurations: dict[str, str], path: Path) -> str:
    return _evaluate(_parse(str(value)), configurations, path)


def _evaluate(parts: list, configurations: dict[str, str], path: Path) -> str:
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        kind, arguments = part
        # launch 3.7 passes an empty quoted argument ('') on as an empty list, which $(equals) compares
        # as the text "[]": $(equals $(var empty) '') is false there, so here too.
        args = ["[]" if kind == "equals" and a == [] else _evaluate(a, configurations, path) for a in arguments]
        out.append(_perform(kind, args, configurations, path))
    return "".join(out)


def _perform(kind: str, args: list[str], configurations: dict[str, str], path: Path) -> str:
    def expect(low: int, high: int) -> None:
        if not low <= len(args) <= high:
            raise LaunchFileError(f"{path.name}: $({kind}) takes {low if low == high else f'{low} or {high}'} "
                                  f"argument(s), got {len(args)}")
    if kind == "var":
        expect(1, 1)
        if args[0] not in configurations:
            raise LaunchFileError(f"{path.name}: $(var {args[0]}) names no argument set so far")
        return configurations[args[0]]
    if kind == "find-pkg-share":
        expect(1, 1)
        return str(package_share(args[0]))
    if kind == "env":
        expect(1, 2)
        value = os.environ.get(args[0], args[1] if len(args) == 2 else None)
        if value is None:
            raise LaunchFileError(f"{path.name}: $(env {args[0]}): environment variable '{args[0]}' is not set; "
                                  f"set it or give a default, $(env {args[0]} DEFAULT)")
        return value
    if kind == "equals":
        expect(2, 2)
        return str(_equal(*args)).lower()
    raise LaunchFileError(f"{path.name}: substitution $({kind}) is not supported here")


def _equal(left: str, right: str) -> bool:
    """launch's $(equals): booleans (true/false/1/0) by truth, numbers by closeness, else text."""
    booleans = ("true", "false", "1", "0")
    if left.lower() in booleans and right.lower() in booleans:
        return (left.lower() in ("true", "1")) == (right.lower() in ("true", "1"))
    try:
        return math.isclose(float(left), float(right))
    except ValueError:
        return left == right

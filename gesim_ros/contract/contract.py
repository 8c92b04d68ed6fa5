"""The G2 topic contract: the single source of truth for topic names, types, rates, QoS, frames and
joint names.

A contract is a YAML profile (``gesim_ros/contract/profiles/<profile>.yaml``, or any file passed by path).
Topic names in it are relative and resolved under a namespace (robot, world model, policy), so the
same contract describes the physical robot, the world-model mirror and the policy-facing side.
This module has no ROS imports: it is plain data, validated at load time; ``ros_qos`` and
``message_class`` bridge it to rclpy where a node needs that.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

PROFILE_DIR = Path(__file__).parent / "profiles"
DEFAULT_PROFILE = "g2_gdk"

#: Message types gesim_ros knows how to produce and consume.
KNOWN_MESSAGE_TYPES = frozenset({
    "sensor_msgs/msg/Image",
    "sensor_msgs/msg/CompressedImage",
    "sensor_msgs/msg/JointState",
    "sensor_msgs/msg/Imu",
    "sensor_msgs/msg/PointCloud2",
    "diagnostic_msgs/msg/DiagnosticArray",
    "rosgraph_msgs/msg/Clock",
    "gesim_ros_interfaces/msg/Tactile",
    "gesim_ros_interfaces/msg/ActionChunk",
    "gesim_ros_interfaces/msg/EpisodeEvent",
    "gesim_ros_interfaces/msg/BackendStatus",
    "gesim_ros_interfaces/msg/JudgeStatus",
})
KNOWN_SERVICE_TYPES = frozenset({
    "gesim_ros_interfaces/srv/SelectBackend",
    "gesim_ros_interfaces/srv/EpisodeControl",
    "gesim_ros_interfaces/srv/ResetEpisode",
})
ROLES = ("sensor", "command", "system")
RELIABILITIES = ("reliable", "best_effort")
DURABILITIES = ("volatile", "transient_local")
CAMERA_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
IMAGE_ENCODINGS = ("rgb8", "bgr8", "rgba8", "mono8", "16UC1", "32FC1", "jpeg", "png")
NAMESPACE_KEYS = ("robot", "world_model", "policy")
JOINT_GROUPS = ("waist", "head", "left_arm", "right_arm", "left_gripper", "right_gripper")
VIEWS = ("head", "left_wrist", "right_wrist")
CALIBRATION_KEYS = ("fx", "fy", "cx", "cy", "link", "xyz", "rpy")


class ContractError(ValueError):
    """A contract file is invalid: the message names the file, the key and the fix."""

    def __init__(self, source: str, key: str, problem: str, fix: str):
        super().__init__(f"contract {source}: {key}: {problem}. Fix: {fix}")
        self.source, self.key, self.problem, self.fix = source, key, problem, fix


@dataclass(frozen=True)
class QosSpec:
    name: str
    reliability: str
    durability: str
    depth: int
    # AUTOMATIC liveliness with this lease: DDS itself tells a subscriber, within about the lease,
    # that a publisher's process is gone (even after kill -9). None: no lease (DDS's infinite default).
    liveliness_lease_s: float | None = None


@dataclass(frozen=True)
class CameraCalibration:
    """A camera's pinhole intrinsics and where it sits on the robot.

    ``fx, fy, cx, cy`` are in pixels at the camera topic's ``width`` x ``height``. The mount is the
    pose of the camera's optical frame (x right, y down, z forward: OpenCV's, as GE-Sim's
    camera-to-world matrices use) in the frame of robot link ``link``: ``xyz`` in metres and
    ``rpy`` fixed-axis roll, pitch, yaw in radians (URDF's convention: R = Rz(yaw) Ry(pitch) Rx(roll)).
    """
    fx: float
    fy: float
    cx: float
    cy: float
    link: str
    xyz: tuple[float, float, float]
    rpy: tuple[float, float, float]


@dataclass(frozen=True)
class TopicSpec:
    key: str
    name: str  # relative; see resolve()
    type: str
    role: str
    qos: QosSpec
    rate_hz: float | None = None
    frame_id: str = ""
    encoding: str | None = None
    width: int | None = None
    height: int | None = None
    view: str | None = None
    calibration: CameraCalibration | None = None

    @property
    def is_camera(self) -> bool:
        return self.type in CAMERA_TYPES

    def resolve(self, namespace: str = "/") -> str:
        """Absolute topic name under ``namespace`` ('/' for the root)."""
        return join_name(namespace, self.name)


@dataclass(frozen=True)
class ServiceSpec:
    key: str
    name: str
    type: str

    def resolve(self, namespace: str = "/") -> str:
        return join_name(namespace, self.name)


@dataclass(frozen=True)
class Contract:
    profile: str
    source: str
    description: str
    namespaces: Mapping[str, str]
    joint_groups: Mapping[str, tuple[str, ...]]
    joint_limits: Mapping[str, tuple[float, float]]
    max_joint_velocity: Mapping[str, float]  # per joint name
    frames: Mapping[str, str]
    topics: Mapping[str, TopicSpec]
    services: Mapping[str, ServiceSpec]
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)

    @property
    def joint_names(self) -> tuple[str, ...]:
        """Every joint, in contract order: waist, head, left arm, right arm, grippers."""
        return tuple(n for g in JOINT_GROUPS for n in self.joint_groups[g])

    @property
    def arm_joint_names(self) -> tuple[str, ...]:
        """The policy's action joints: [L7 arm, R7 arm, L gripper, R gripper] (GE-Sim's policy side)."""
        return tuple(n for g in ("left_arm", "right_arm", "left_gripper", "right_gripper")
                     for n in self.joint_groups[g])

    def topic(self, key: str) -> TopicSpec:
        try:
            return self.topics[key]
        except KeyError:
            raise KeyError(f"contract {self.source} has no topic '{key}'; "
                           f"topics: {', '.join(sorted(self.topics))}") from None

    def service(self, key: str) -> ServiceSpec:
        try:
            return self.services[key]
        except KeyError:
            raise KeyError(f"contract {self.source} has no service '{key}'; "
                           f"services: {', '.join(sorted(self.services))}") from None

    def topics_with_role(self, role: str) -> list[TopicSpec]:
        return [t for t in self.topics.values() if t.role == role]

    @property
    def cameras(self) -> list[TopicSpec]:
        return [t for t in self.topics.values() if t.is_camera]

    def camera_for_view(self, view: str) -> TopicSpec:
        for t in self.cameras:
            if t.view == view:
                return t
        raise KeyError(f"contract {self.source} has no camera for view '{view}'")

    def namespace(self, side: str) -> str:
        try:
            return self.namespaces[side]
        except KeyError:
            raise KeyError(f"unknown namespace '{side}'; known: {', '.join(NAMESPACE_KEYS)}") from None


def join_name(namespace: str, name: str) -> str:
    ns = "/" + namespace.strip("/")
    return (ns.rstrip("/") + "/" + name.strip("/")) if ns != "/" else "/" + name.strip("/")


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_contract(profile_or_path: str | Path = DEFAULT_PROFILE) -> Contract:
    """Load and validate a contract by profile name (see ``available_profiles()``) or YAML path."""
    text_arg = str(profile_or_path)
    path = Path(text_arg)
    if not (text_arg.endswith((".yaml", ".yml")) or path.is_file()):
        path = PROFILE_DIR / f"{text_arg}.yaml"
        if not path.is_file():
            raise ContractError(text_arg, "profile", f"unknown profile name '{text_arg}'",
                                f"use one of {', '.join(available_profiles())} or a path to a YAML file")
    if not path.is_file():
        raise ContractError(str(path), "file", "no such file", "pass an existing contract YAML path")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ContractError(str(path), "yaml", f"not valid YAML ({exc})", "correct the YAML syntax") from None
    return parse_contract(data, str(path))


def parse_contract(data: Any, source: str) -> Contract:
    v = _Validator(source)
    root = v.mapping(data, "(top level)")
    profile = v.string(root, "profile")
    namespaces = {k: v.string(v.mapping(root.get("namespaces"), "namespaces"), k, "namespaces")
                  for k in NAMESPACE_KEYS}

    qos_profiles = {}
    for qname, q in v.mapping(root.get("qos_profiles"), "qos_profiles").items():
        q = v.mapping(q, f"qos_profiles.{qname}")
        key = f"qos_profiles.{qname}"
        qos_profiles[qname] = QosSpec(
            name=qname,
            reliability=v.choice(q, "reliability", RELIABILITIES, key),
            durability=v.choice(q, "durability", DURABILITIES, key),
            depth=v.positive_int(q, "depth", key),
            liveliness_lease_s=v.optional_positive_number(q, "liveliness_lease_s", key))

    groups_raw = v.mapping(root.get("joints"), "joints")
    joint_groups: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for g in JOINT_GROUPS:
        names = groups_raw.get(g)
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            v.fail(f"joints.{g}", "missing or not a non-empty list of joint names",
                   f"list the {g} joint names, e.g. '{g}: [name1, name2]'")
        for n in names:
            if n in seen:
                v.fail(f"joints.{g}", f"joint '{n}' is listed twice (also in joints.{seen[n]})",
                       "list each joint exactly once")
            seen[n] = g
        joint_groups[g] = tuple(names)
    for g in groups_raw:
        if g not in JOINT_GROUPS:
            v.fail(f"joints.{g}", "unknown joint group", f"use the groups {', '.join(JOINT_GROUPS)}")

    limits_raw = v.mapping(root.get("joint_limits"), "joint_limits")
    joint_limits = {}
    for n in seen:
        lim = limits_raw.get(n)
        if not (isinstance(lim, list) and len(lim) == 2 and all(_is_number(x) for x in lim)
                and lim[0] < lim[1]):
            v.fail(f"joint_limits.{n}", "missing or not [lower, upper] with lower < upper",
                   f"add '{n}: [lower, upper]'")
        joint_limits[n] = (float(lim[0]), float(lim[1]))
    for n in limits_raw:
        if n not in seen:
            v.fail(f"joint_limits.{n}", "limit for a joint not listed under joints",
                   "remove it or add the joint to a group")

    vel_raw = v.mapping(root.get("max_joint_velocity"), "max_joint_velocity")
    max_vel = {}
    for g in JOINT_GROUPS:
        val = vel_raw.get(g)
        if not (_is_number(val) and val > 0):
            v.fail(f"max_joint_velocity.{g}", "missing or not a positive number",
                   f"set '{g}: <velocity>' (rad/s, m/s for grippers)")
        max_vel.update({n: float(val) for n in joint_groups[g]})

    frames = {k: str(x) for k, x in v.mapping(root.get("frames"), "frames").items()}

    topics: dict[str, TopicSpec] = {}
    names_seen: dict[str, str] = {}
    for key, t in v.mapping(root.get("topics"), "topics").items():
        where = f"topics.{key}"
        t = v.mapping(t, where)
        name = v.string(t, "name", where)
        if name in names_seen:
            v.fail(f"{where}.name", f"duplicate topic name '{name}' (also topics.{names_seen[name]})",
                   "give each topic its own name")
        names_seen[name] = key
        mtype = v.string(t, "type", where)
        if mtype not in KNOWN_MESSAGE_TYPES:
            v.fail(f"{where}.type", f"unknown message type '{mtype}'",
                   f"use one of {', '.join(sorted(KNOWN_MESSAGE_TYPES))}")
        role = v.choice(t, "role", ROLES, where)
        qname = v.string(t, "qos", where)
        if qname not in qos_profiles:
            v.fail(f"{where}.qos", f"unknown QoS profile '{qname}'",
                   f"use one of {', '.join(qos_profiles)} or define it under qos_profiles")
        rate = t.get("rate_hz")
        if role == "sensor" and not (_is_number(rate) and rate > 0):
            v.fail(f"{where}.rate_hz", "missing or not a positive number (sensors need a nominal rate)",
                   "set 'rate_hz: <Hz>'")
        spec = TopicSpec(key=key, name=name, type=mtype, role=role, qos=qos_profiles[qname],
                         rate_hz=float(rate) if _is_number(rate) else None,
                         frame_id=str(t.get("frame_id", "")), encoding=t.get("encoding"),
                         width=t.get("width"), height=t.get("height"), view=t.get("view"),
                         calibration=v.calibration(t.get("calibration"), where))
        if spec.is_camera:
            if spec.encoding not in IMAGE_ENCODINGS:
                v.fail(f"{where}.encoding", f"unknown image encoding '{spec.encoding}'",
                       f"use one of {', '.join(IMAGE_ENCODINGS)}")
            for dim in ("width", "height"):
                if not (isinstance(t.get(dim), int) and t[dim] > 0):
                    v.fail(f"{where}.{dim}", "missing or not a positive integer", f"set '{dim}: <pixels>'")
        if spec.calibration is not None and not spec.is_camera:
            v.fail(f"{where}.calibration", "calibration on a topic that is not a camera",
                   f"remove it, or make the topic one of {', '.join(CAMERA_TYPES)}")
        if spec.view is not None and spec.view not in VIEWS:
            v.fail(f"{where}.view", f"unknown view '{spec.view}'", f"use one of {', '.join(VIEWS)}")
        topics[key] = spec

    services = {}
    for key, s in v.mapping(root.get("services", {}), "services").items():
        where = f"services.{key}"
        s = v.mapping(s, where)
        stype = v.string(s, "type", where)
        if stype not in KNOWN_SERVICE_TYPES:
            v.fail(f"{where}.type", f"unknown service type '{stype}'",
                   f"use one of {', '.join(sorted(KNOWN_SERVICE_TYPES))}")
        services[key] = ServiceSpec(key=key, name=v.string(s, "name", where), type=stype)

    return Contract(profile=profile, source=source, description=str(root.get("description", "")),
                    namespaces=namespaces, joint_groups=joint_groups, joint_limits=joint_limits,
                    max_joint_velocity=max_vel, frames=frames, topics=topics, services=services,
                    raw=root)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class _Validator:
    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, problem: str, fix: str):
        raise ContractError(self.source, key, problem, fix)

    def mapping(self, value: Any, key: str) -> dict:
        if not isinstance(value, dict):
            self.fail(key, "missing or not a mapping", f"add a '{key}:' section of 'name: value' entries")
        return value

    def string(self, m: dict, key: str, where: str = "") -> str:
        full = f"{where}.{key}" if where else key
        val = m.get(key)
        if not isinstance(val, str) or not val:
            self.fail(full, "missing or not a non-empty string", f"set '{key}: <text>'")
        return val

    def choice(self, m: dict, key: str, options: tuple[str, ...], where: str) -> str:
        val = m.get(key)
        if val not in options:
            self.fail(f"{where}.{key}", f"missing or invalid value {val!r}", f"use one of {', '.join(options)}")
        return val

    def optional_positive_number(self, m: dict, key: str, where: str) -> float | None:
        val = m.get(key)
        if val is None:
            return None
        if not (_is_number(val) and val > 0):
            self.fail(f"{where}.{key}", f"not a positive number of seconds ({val!r})",
                      f"set '{key}: <seconds>' or remove it")
        return float(val)

    def calibration(self, value: Any, where: str) -> CameraCalibration | None:
        """A camera topic's optional ``calibration`` mapping (see CameraCalibration)."""
        if value is None:
            return None
        key = f"{where}.calibration"
        c = self.mapping(value, key)
        unknown = sorted(set(c) - set(CALIBRATION_KEYS))
        if unknown:
            self.fail(f"{key}.{unknown[0]}", "unknown calibration key", f"use the keys {', '.join(CALIBRATION_KEYS)}")
        for name in ("fx", "fy"):
            if not (_is_number(c.get(name)) and c[name] > 0):
                self.fail(f"{key}.{name}", f"missing or not a positive focal length ({c.get(name)!r})",
                          f"set '{name}: <pixels>' at the topic's width x height")
        for name in ("cx", "cy"):
            if not _is_number(c.get(name)):
                self.fail(f"{key}.{name}", f"missing or not a number ({c.get(name)!r})",
                          f"set '{name}: <pixels>' (the principal point, at the topic's width x height)")
        for name in ("xyz", "rpy"):
            vec = c.get(name)
            if not (isinstance(vec, list) and len(vec) == 3 and all(_is_number(x) for x in vec)):
                self.fail(f"{key}.{name}", f"missing or not a list of 3 numbers ({vec!r})",
                          f"set '{name}: [x, y, z]' ({'metres' if name == 'xyz' else 'roll, pitch, yaw in rad'})")
        return CameraCalibration(fx=float(c["fx"]), fy=float(c["fy"]), cx=float(c["cx"]), cy=float(c["cy"]),
                                 link=self.string(c, "link", key), xyz=tuple(map(float, c["xyz"])),
                                 rpy=tuple(map(float, c["rpy"])))

    def positive_int(self, m: dict, key: str, where: str) -> int:
        val = m.get(key)
        if not (isinstance(val, int) and not isinstance(val, bool) and val > 0):
            self.fail(f"{where}.{key}", f"missing or not a positive integer ({val!r})", f"set '{key}: <n>'")
        return val


def message_class(type_name: str):
    """The Python class for 'pkg/msg/Name' or 'pkg/srv/Name' (imports the generated interface)."""
    pkg, kind, name = type_name.split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


def ros_qos(spec: QosSpec):
    """rclpy QoSProfile for a contract QoS entry (imports rclpy: call it from nodes only)."""
    from rclpy.duration import Duration
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, LivelinessPolicy, QoSProfile, ReliabilityPolicy
    qos = QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=spec.depth,
        reliability=(ReliabilityPolicy.RELIABLE if spec.reliability == "reliable"
                     else ReliabilityPolicy.BEST_EFFORT),
        durability=(DurabilityPolicy.TRANSIENT_LOCAL if spec.durability == "transient_local"
                    else DurabilityPolicy.VOLATILE))
    if spec.liveliness_lease_s is not None:
        qos.liveliness = LivelinessPolicy.AUTOMATIC
        qos.liveliness_lease_duration = Duration(seconds=spec.liveliness_lease_s)
    return qos


#: Reliable streams that pass through a relay or a monitor: how long its stall may last without losing a message.
RELAY_BUFFER_S = 1.0


def relay_qos(spec: TopicSpec):
    """The contract's QoS for a stream that is relayed or monitored; a reliable one gets RELAY_BUFFER_S of
    history at its rate, so the extra hop loses nothing that a direct subscriber would have received."""
    qos = ros_qos(spec.qos)
    if spec.qos.reliability == "reliable" and spec.rate_hz:
        qos.depth = max(qos.depth, math.ceil(spec.rate_hz * RELAY_BUFFER_S))
    return qos

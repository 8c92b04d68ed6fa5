"""Build and read the contract's messages from numpy data, shared by every node.

Plain functions over message classes (no rclpy node needed). Arrays are copied once into a
message; readers return numpy views where the message layout allows it.
"""

from __future__ import annotations

import array
import math
import struct

import numpy as np
from builtin_interfaces.msg import Duration, Time
from gesim_ros_interfaces.msg import ActionChunk, Tactile
from sensor_msgs.msg import Imu, JointState, PointCloud2, PointField
from std_msgs.msg import Header


def _sec_nanosec(seconds_: float) -> tuple[int, int]:
    """Whole seconds (floored, so negative durations keep a positive nanosec, as ROS stores them) and
    nanoseconds; a fraction that rounds up to a whole second carries into ``sec``."""
    sec = math.floor(seconds_)
    nanosec = round((seconds_ - sec) * 1e9)
    return (sec + 1, 0) if nanosec == 1_000_000_000 else (sec, nanosec)


def time_msg(seconds_: float) -> Time:
    sec, nanosec = _sec_nanosec(seconds_)
    return Time(sec=sec, nanosec=nanosec)


def seconds(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def duration_msg(seconds_: float) -> Duration:
    sec, nanosec = _sec_nanosec(seconds_)
    return Duration(sec=sec, nanosec=nanosec)


def header(stamp_s: float, frame_id: str) -> Header:
    return Header(stamp=time_msg(stamp_s), frame_id=frame_id)


def _doubles(values) -> array.array:
    out = array.array("d")
    out.frombytes(memoryview(np.ascontiguousarray(values, dtype=np.float64).ravel()).cast("B"))
    return out


def _floats(values) -> array.array:
    out = array.array("f")
    out.frombytes(memoryview(np.ascontiguousarray(values, dtype=np.float32).ravel()).cast("B"))
    return out


def joint_state_msg(stamp_s: float, frame_id: str, names, position, velocity=(), effort=()) -> JointState:
    msg = JointState(header=header(stamp_s, frame_id), name=list(names))
    msg.position = _doubles(position)
    msg.velocity = _doubles(velocity)
    msg.effort = _doubles(effort)
    return msg


def imu_msg(stamp_s: float, frame_id: str, quat_xyzw, angular_velocity, linear_acceleration) -> Imu:
    msg = Imu(header=header(stamp_s, frame_id))
    msg.orientation.x, msg.orientation.y, msg.orientation.z, msg.orientation.w = map(float, quat_xyzw)
    msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = map(float, angular_velocity)
    (msg.linear_acceleration.x, msg.linear_acceleration.y,
     msg.linear_acceleration.z) = map(float, linear_acceleration)
    return msg


_XYZ_FIELDS = [PointField(name=n, offset=4 * i, datatype=PointField.FLOAT32, count=1)
               for i, n in enumerate("xyz")]


def point_cloud_msg(stamp_s: float, frame_id: str, points: np.ndarray) -> PointCloud2:
    """Unorganised xyz float32 cloud from an (N, 3) array."""
    points = np.ascontiguousarray(points, dtype=np.float32).reshape(-1, 3)
    msg = PointCloud2(header=header(stamp_s, frame_id), height=1, width=len(points),
                      fields=_XYZ_FIELDS, is_bigendian=False, point_step=12,
                      row_step=12 * len(points), is_dense=bool(np.isfinite(points).all()))
    msg.data = array.array("B", points.tobytes())
    return msg


def points_from_cloud(msg: PointCloud2) -> np.ndarray:
    """(N, 3) float32 view of an xyz cloud written by ``point_cloud_msg``."""
    return np.frombuffer(msg.data, np.float32).reshape(-1, msg.point_step // 4)[:, :3]


def tactile_msg(stamp_s: float, frame_id: str, grid) -> Tactile:
    """Tactile from a taxel grid with rows, cols, resolution_*_mm, normal/shear_x/shear_y (mN),
    contact and valid (row-major, rows*cols each)."""
    msg = Tactile(header=header(stamp_s, frame_id), sensor_type="tactile", rows=int(grid.rows),
                  cols=int(grid.cols), resolution_x_mm=float(grid.resolution_x_mm),
                  resolution_y_mm=float(grid.resolution_y_mm))
    msg.normal_force = _floats(grid.normal)
    msg.shear_x = _floats(grid.shear_x)
    msg.shear_y = _floats(grid.shear_y)
    msg.contact = [bool(c) for c in np.ravel(grid.contact)]
    msg.valid = [bool(v) for v in np.ravel(grid.valid)]
    return msg


def action_chunk_msg(stamp_s: float, frame_id: str, episode_id: str, sequence: int, joint_names,
                     positions: np.ndarray, control_period_s: float) -> ActionChunk:
    positions = np.asarray(positions, dtype=np.float64)
    if positions.ndim != 2 or positions.shape[1] != len(joint_names):
        raise ValueError(f"action chunk positions must be (horizon, {len(joint_names)}) for "
                         f"{len(joint_names)} joint names, got {positions.shape}")
    msg = ActionChunk(header=header(stamp_s, frame_id), episode_id=episode_id, sequence=int(sequence),
                      joint_names=list(joint_names), horizon=positions.shape[0],
                      control_period=duration_msg(control_period_s))
    msg.positions = _doubles(positions.ravel())
    return msg


def chunk_positions(msg: ActionChunk) -> np.ndarray:
    """(horizon, joints) view of an ActionChunk's targets; shape is checked by command validation."""
    return np.frombuffer(msg.positions, np.float64) if len(msg.positions) else np.zeros(0)


# ----- header stamps of serialised (CDR) messages, read and set without deserialising

def header_stamp(cdr: bytes) -> float:
    """The header stamp (s) of a CDR message whose first field is a std_msgs/Header."""
    sec, nsec = struct.unpack_from(_stamp_format(cdr), cdr, 4)
    return sec + nsec * 1e-9


def restamped(cdr: bytes, stamp_s: float) -> bytes:
    """``cdr`` with its header stamp set to ``stamp_s``, patched in place of the 8 stamp bytes that
    follow the 4-byte encapsulation header: no deserialisation, the rest stays byte for byte."""
    sec, nsec = stamp_fields(stamp_s)
    out = bytearray(cdr)
    struct.pack_into(_stamp_format(cdr), out, 4, sec, nsec)
    return bytes(out)


def stamp_fields(stamp_s: float) -> tuple[int, int]:
    sec = math.floor(stamp_s)
    return sec, min(round((stamp_s - sec) * 1e9), 999_999_999)


def _stamp_format(cdr: bytes) -> str:
    return "<iI" if cdr[1] & 1 else ">iI"  # encapsulation kind: odd is little-endian

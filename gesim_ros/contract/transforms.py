"""Rigid transforms with tf_transformations' conventions on top of transforms3d.

ROS (and tf_transformations) write quaternions as (x, y, z, w); transforms3d writes (w, x, y, z).
Every function here takes and returns ROS order, so callers never reorder by hand.
"""

from __future__ import annotations

import numpy as np
import transforms3d.euler as _euler
import transforms3d.quaternions as _quat


def _to_wxyz(q) -> np.ndarray:
    x, y, z, w = np.asarray(q, dtype=float)
    return np.array([w, x, y, z])


def _to_xyzw(q) -> np.ndarray:
    w, x, y, z = np.asarray(q, dtype=float)
    return np.array([x, y, z, w])


def quaternion_from_euler(ai: float, aj: float, ak: float, axes: str = "sxyz") -> np.ndarray:
    return _to_xyzw(_euler.euler2quat(ai, aj, ak, axes))


def euler_from_quaternion(q, axes: str = "sxyz") -> tuple[float, float, float]:
    return _euler.quat2euler(_to_wxyz(q), axes)


def quaternion_multiply(q1, q0) -> np.ndarray:
    """q1 * q0: rotate by q0, then by q1 (tf_transformations' argument order)."""
    return _to_xyzw(_quat.qmult(_to_wxyz(q1), _to_wxyz(q0)))


def quaternion_inverse(q) -> np.ndarray:
    return _to_xyzw(_quat.qinverse(_to_wxyz(q)))


def quaternion_matrix(q) -> np.ndarray:
    """4x4 homogeneous rotation matrix of a quaternion (x, y, z, w)."""
    m = np.eye(4)
    m[:3, :3] = _quat.quat2mat(_to_wxyz(q))
    return m


def quaternion_from_matrix(matrix) -> np.ndarray:
    """Unit quaternion (x, y, z, w) of a 3x3 or 4x4 rotation matrix, with w >= 0."""
    q = _to_xyzw(_quat.mat2quat(np.asarray(matrix, dtype=float)[:3, :3]))
    return -q if q[3] < 0 else q


def translation_matrix(t) -> np.ndarray:
    m = np.eye(4)
    m[:3, 3] = t
    return m


def transform_from_pose(translation, quaternion) -> np.ndarray:
    """4x4 transform from a position and a quaternion (x, y, z, w)."""
    m = quaternion_matrix(quaternion)
    m[:3, 3] = translation
    return m


def pose_from_transform(matrix) -> tuple[np.ndarray, np.ndarray]:
    """(translation, quaternion (x, y, z, w)) of a 4x4 transform."""
    matrix = np.asarray(matrix, dtype=float)
    return matrix[:3, 3].copy(), quaternion_from_matrix(matrix)


def inverse_transform(matrix) -> np.ndarray:
    """Inverse of a rigid 4x4 transform (exact, no general matrix inversion)."""
    matrix = np.asarray(matrix, dtype=float)
    inv = np.eye(4)
    inv[:3, :3] = matrix[:3, :3].T
    inv[:3, 3] = -matrix[:3, :3].T @ matrix[:3, 3]
    return inv

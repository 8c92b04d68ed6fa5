import math

import numpy as np

from gesim_ros.contract import transforms as tf


def test_quaternions_are_xyzw():
    q = tf.quaternion_from_euler(0, 0, math.pi / 2)
    np.testing.assert_allclose(q, [0, 0, math.sin(math.pi / 4), math.cos(math.pi / 4)], atol=1e-12)
    np.testing.assert_allclose(tf.euler_from_quaternion(q), [0, 0, math.pi / 2], atol=1e-12)


def test_multiply_applies_right_then_left():
    yaw = tf.quaternion_from_euler(0, 0, math.pi / 2)
    roll = tf.quaternion_from_euler(math.pi / 2, 0, 0)
    m = tf.quaternion_matrix(tf.quaternion_multiply(yaw, roll))[:3, :3]
    # roll first maps y to z; yaw then leaves z alone
    np.testing.assert_allclose(m @ [0, 1, 0], [0, 0, 1], atol=1e-12)
    np.testing.assert_allclose(tf.quaternion_multiply(yaw, tf.quaternion_inverse(yaw)), [0, 0, 0, 1], atol=1e-12)


def test_pose_transform_round_trip_and_inverse():
    q = tf.quaternion_from_euler(0.3, -0.2, 1.1)
    T = tf.transform_from_pose([1, 2, 3], q)
    t, q2 = tf.pose_from_transform(T)
    np.testing.assert_allclose(t, [1, 2, 3])
    np.testing.assert_allclose(q2, q if q[3] >= 0 else -q, atol=1e-12)
    np.testing.assert_allclose(tf.inverse_transform(T) @ T, np.eye(4), atol=1e-12)
    np.testing.assert_allclose(tf.translation_matrix([1, 0, 0]) @ [0, 0, 0, 1], [1, 0, 0, 1])

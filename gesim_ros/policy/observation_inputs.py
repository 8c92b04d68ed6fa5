"""The observation topics a policy or a success checker reads, under one namespace: the latest message
of each, decoded into the plugin's observation dict (``gesim_ros.policy.api``) on demand. Shared by
the `policy` node and the `episode_runner` node (its success checker)."""

from __future__ import annotations

from functools import partial

import numpy as np
from rclpy.node import Node

from gesim_ros.contract.contract import Contract, message_class, ros_qos
from gesim_ros.contract.image_codec import ImageCodecError, rgb_from_camera_msg
from gesim_ros.policy.api import IMAGES, IMU, STATE, TACTILE, ObservationError, build_observation, observation_topics


class ObservationInputs:
    """The latest message of each observation topic, decoded into an observation only on demand
    (decoding every camera frame at 30 Hz would cost more than the policy)."""

    def __init__(self, node: Node, contract: Contract, namespace: str, keys):
        self.joint_names = contract.arm_joint_names
        self.topics = observation_topics(contract, dict.fromkeys([STATE, *keys]))  # state is always observed
        self.latest: dict = {}
        for key, spec in self.topics.items():
            node.create_subscription(message_class(spec.type), spec.resolve(namespace),
                                     partial(self.latest.__setitem__, key), ros_qos(spec.qos))
        self.names = {key: spec.resolve(namespace) for key, spec in self.topics.items()}

    def clear(self) -> None:
        """Forget what arrived before an episode start (it may come from the previous backend)."""
        self.latest.clear()

    def missing(self) -> list[str]:
        return [self.names[k] for k in self.topics if k not in self.latest]

    def observation(self, task_text: str, episode: dict) -> dict:
        latest = dict(self.latest)
        images, tactile, state, imu = {}, {}, None, None
        for key, msg in latest.items():
            if key == STATE:
                state = self._state(msg)
            elif key == IMU:
                imu = _imu_vector(msg)
            elif key.startswith(IMAGES):
                images[key[len(IMAGES):]] = self._image(key, msg)
            elif key.startswith(TACTILE):
                tactile[key[len(TACTILE):]] = self._taxels(key, msg)
        return build_observation(state, images, tactile, imu, task_text, episode)

    def _state(self, msg) -> np.ndarray:
        index = {n: i for i, n in enumerate(msg.name)}
        missing = [n for n in self.joint_names if n not in index]
        if missing or len(msg.position) != len(msg.name):
            raise ObservationError(f"{self.names[STATE]}: joint state lacks action joint(s) {missing} or has "
                                   f"{len(msg.position)} positions for {len(msg.name)} names")
        return np.asarray(msg.position, dtype=np.float64)[[index[n] for n in self.joint_names]]

    def _image(self, key: str, msg) -> np.ndarray:
        try:
            return rgb_from_camera_msg(msg, self.names[key])
        except ImageCodecError as exc:
            raise ObservationError(str(exc)) from None

    def _taxels(self, key: str, msg) -> np.ndarray:
        cells = msg.rows * msg.cols
        fields = (msg.normal_force, msg.shear_x, msg.shear_y)
        if any(len(f) != cells for f in fields):
            raise ObservationError(f"{self.names[key]}: tactile arrays must hold rows*cols = {cells} taxels, "
                                   f"got {[len(f) for f in fields]}")
        return np.stack([np.asarray(f, np.float32).reshape(msg.rows, msg.cols) for f in fields], -1)


def _imu_vector(msg) -> np.ndarray:
    o, w, a = msg.orientation, msg.angular_velocity, msg.linear_acceleration
    return np.array([o.x, o.y, o.z, o.w, w.x, w.y, w.z, a.x, a.y, a.z], np.float32)

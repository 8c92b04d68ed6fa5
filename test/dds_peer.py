"""Peer process for test_interfaces_dds: publishes one sample of every message type on its own
topic and serves every custom service, until killed. Run as `python dds_peer.py`."""

import sys

import numpy as np

from gesim_ros.contract.contract import KNOWN_MESSAGE_TYPES, KNOWN_SERVICE_TYPES, message_class


def sample(type_name: str):
    """A message with distinctive, type-appropriate content."""
    from gesim_ros.contract import messages as m
    from gesim_ros.contract.image_codec import to_compressed_msg, to_image_msg

    short = type_name.split("/")[-1]
    if short == "Image":
        return to_image_msg(np.arange(12 * 16, dtype=np.uint16).reshape(12, 16), "16UC1", m.header(1.5, "cam"))
    if short == "CompressedImage":
        return to_compressed_msg(np.full((8, 8, 3), 77, np.uint8), "rgb8", "png", header=m.header(1.5, "cam"))
    if short == "JointState":
        return m.joint_state_msg(2.0, "base_link", ["a", "b"], [0.1, 0.2], [1.0, 2.0], [3.0, 4.0])
    if short == "Imu":
        return m.imu_msg(2.0, "imu", (0, 0, 0, 1), (0.1, 0.2, 0.3), (0, 0, 9.81))
    if short == "PointCloud2":
        return m.point_cloud_msg(2.0, "lidar", np.arange(30, dtype=np.float32).reshape(10, 3))
    if short == "Tactile":
        class G:
            rows, cols, resolution_x_mm, resolution_y_mm = 2, 3, 4.0, 4.0
            normal = np.arange(6, dtype=np.float32)
            shear_x = shear_y = np.ones(6, np.float32)
            contact = normal > 2
            valid = np.ones(6, bool)
        return m.tactile_msg(3.0, "pad", G)
    if short == "ActionChunk":
        return m.action_chunk_msg(3.0, "base_link", "ep-7", 4, ["a", "b"], np.arange(6.0).reshape(3, 2), 0.05)
    cls = message_class(type_name)
    msg = cls()
    if short == "EpisodeEvent":
        msg.event, msg.episode_id, msg.task, msg.seed, msg.outcome = cls.ENDED, "ep-7", "push", 42, cls.OUTCOME_SUCCESS
    elif short == "BackendStatus":
        msg.mode, msg.paths, msg.message_counts, msg.rejection_counts = "shadow", ["real.commands"], [5], [1]
    elif short == "JudgeStatus":
        msg.episode_id, msg.step, msg.success_probability = "ep-7", 9, 0.75
    elif short == "DiagnosticArray":
        from diagnostic_msgs.msg import DiagnosticStatus
        msg.status = [DiagnosticStatus(name="switch", message="ok")]
    elif short == "Clock":
        msg.clock.sec = 12
    return msg


def topic_for(type_name: str) -> str:
    return "/dds_test/" + type_name.replace("/", "_")


def main():
    import rclpy
    from rclpy.qos import QoSDurabilityPolicy, QoSProfile

    rclpy.init()
    node = rclpy.create_node("dds_peer")
    qos = QoSProfile(depth=1, durability=QoSDurabilityPolicy.TRANSIENT_LOCAL)
    pubs = [(node.create_publisher(message_class(t), topic_for(t), qos), sample(t)) for t in sorted(KNOWN_MESSAGE_TYPES)]

    def handler(request, response):
        if hasattr(response, "accepted"):
            response.accepted = True
        if hasattr(response, "reason"):
            response.reason = f"peer saw {type(request).__name__}"
        if hasattr(response, "message"):
            response.message = f"peer saw {type(request).__name__} seed={request.seed}"
        return response

    services = [node.create_service(message_class(t), "/dds_test/" + t.split("/")[-1], handler)
                for t in sorted(KNOWN_SERVICE_TYPES)]
    for pub, msg in pubs:
        pub.publish(msg)
    print("peer ready", len(pubs), len(services), flush=True)
    try:
        rclpy.spin(node)
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()

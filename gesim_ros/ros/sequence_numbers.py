"""Messages lost on a stream, from the publication sequence numbers rclpy reports with each message."""


def messages_missed(last: int | None, sequence: int) -> int:
    """How many messages the publisher sent between sequence numbers ``last`` and ``sequence`` that never
    arrived. A lower or equal number means the publisher restarted (or a duplicate): nothing missed."""
    if last is None or sequence <= last + 1:
        return 0
    return sequence - last - 1

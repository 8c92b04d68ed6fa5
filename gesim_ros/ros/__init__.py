"""ROS plumbing every node shares: parameters and main(), DDS liveliness, the launch-file reader, the process harness."""

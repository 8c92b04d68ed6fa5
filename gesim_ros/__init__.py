"""gesim_ros: robot-in-the-loop sim2real with world models on ROS 2."""

__version__ = "0.1.0"

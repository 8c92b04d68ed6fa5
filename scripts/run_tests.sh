#!/usr/bin/env bash
# Runs the test suite in .venv with DDS kept on this machine (each pytest session also picks a
# ROS_DOMAIN_ID of its own). Extra arguments go to pytest, e.g. -m "not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST MUJOCO_GL=${MUJOCO_GL:-egl}
exec .venv/bin/python -m pytest -p no:cacheprovider --timeout=900 -ra "$@"

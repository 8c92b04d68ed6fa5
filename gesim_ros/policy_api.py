"""The policy plugin API under the name labs import: ``gesim_ros.policy_api`` is ``gesim_ros.policy.api``."""

import sys

from gesim_ros.policy import api

sys.modules[__name__] = api

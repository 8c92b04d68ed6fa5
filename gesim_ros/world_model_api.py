"""The world-model plugin API under the name labs import: ``gesim_ros.world_model_api`` is
``gesim_ros.world_model.api``."""

import sys

from gesim_ros.world_model import api

sys.modules[__name__] = api

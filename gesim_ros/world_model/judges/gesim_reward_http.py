"""Judge ``gesim_reward_http``: a reward model behind GE-Sim-V2's reward interface over HTTP, e.g.
``gesim-ros serve-wm --judge NAME`` (any gesim_ros judge) or a lab's own server of a GE-Sim reward model.

Config ``{"url": "http://host:9000", "timeout_s": 60}``. Each judgement is one request on a fresh
connection:

* ``POST <url>/evaluate``, body (gesim_wire's length-prefixed sections, as ``/set_episode_traj``):
  ``[section of T JPEGs: the head-camera frames, (H, W, 3) RGB each][JSON meta {"frames_shape":
  [T, H, W, 3], "task": "<instruction>"}]`` (``gesim_wire.encode_evaluate_request``);
* reply 200, JSON ``{"success": [T floats], "progress": [T floats]}``, per-frame values in [0, 1]
  (GE-Sim-V2's ``RewardResult``); an error is JSON ``{"error": "..."}`` with a 4xx/5xx status.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

import numpy as np

from gesim_ros.world_model import gesim_wire as wire
from gesim_ros.world_model.backends.gesim_http import error_text
from gesim_ros.world_model.api import Judge, JudgeResult, WorldModelBackendError, WorldModelInputError
from gesim_ros.world_model.judges.reward_client import HEAD_ONLY


class GeSimRewardHttpJudge(Judge):
    """Judges the head-camera frames by POSTing them to ``<url>/evaluate`` (see the module doc)."""

    judge_views = HEAD_ONLY

    def __init__(self, *, url: str, timeout_s: float = 60.0):
        parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise WorldModelInputError(f"url: {url!r} is not an http(s)://host[:port][/path] URL, e.g. "
                                       "'http://127.0.0.1:9000' (a `gesim-ros serve-wm --judge NAME`)")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise WorldModelInputError(f"timeout_s: expected a positive number of seconds, got {timeout_s!r}")
        self.url, self.timeout_s = url.rstrip("/"), float(timeout_s)

    def judge(self, frames: np.ndarray, state: np.ndarray | None, task: str) -> JudgeResult:
        head = np.round(np.clip(np.asarray(frames)[:, :, 0], 0.0, 1.0) * 255.0).astype(np.uint8)  # (T, 3, H, W)
        body = wire.encode_evaluate_request(head.transpose(0, 2, 3, 1), task)
        endpoint = f"{self.url}/evaluate"
        request = urllib.request.Request(endpoint, body, {"Content-Type": "application/octet-stream"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                data = reply.read()
        except urllib.error.HTTPError as exc:
            error = error_text(exc.read())
            raise WorldModelBackendError(
                f"judge gesim_reward_http: POST {endpoint} answered HTTP {exc.code}: {error}. Fix: check that the "
                "server speaks GE-Sim's reward interface (e.g. `gesim-ros serve-wm --judge NAME`)",
                status=exc.code, server_error=error, endpoint="/evaluate") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise WorldModelBackendError(
                f"judge gesim_reward_http: no reply from {endpoint} within timeout_s={self.timeout_s:g} ({reason}). "
                "Fix: start the reward server there (e.g. `gesim-ros serve-wm --backend kinematic --judge NAME`) "
                "or correct the judge_config url", endpoint="/evaluate") from None
        try:
            success, progress = wire.decode_evaluate_response(data, len(head))
        except ValueError as exc:
            raise WorldModelBackendError(f"judge gesim_reward_http: malformed reply from {endpoint}: {exc}",
                                         endpoint="/evaluate") from None
        return JudgeResult(success, progress)

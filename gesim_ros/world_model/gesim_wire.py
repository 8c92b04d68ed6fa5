"""GE-Sim 2.0 HTTP wire format, both directions, so client and server cannot drift apart.

Binary bodies are sequences of sections, each prefixed by its 4-byte big-endian
length. A multi-view frame ``(3, V, H, W)`` float32 ``[0, 1]`` travels as ONE
JPEG (quality 95) with the V views tiled left to right into an ``(H, V*W, 3)``
RGB image. Float arrays travel as little-endian float32 bytes, so state is
bit-exact; frames lose what JPEG loses (about 40+ dB PSNR on camera images).
JSON bodies carry arrays as nested lists of float32 values (exact too).

``/evaluate`` is GE-Sim-V2's reward interface (``RewardClient.evaluate(head_frames, task)``) over
HTTP, which this package defines (GE-Sim-V2 has it in-process only): the request carries the
``(T, H, W, 3)`` uint8 head-camera frames as T JPEGs the way ``/set_episode_traj`` carries a band,
the reply per-frame ``success`` and ``progress`` as JSON lists. ``/set_episode_state`` is
serve-wm's own (GE-Sim-V2's server has no such endpoint).

Every decoder raises :class:`WireFormatError` (a ``ValueError``, mapped to HTTP
400 by the server) on truncated, garbled or self-inconsistent input, and never
allocates more than the body size allows.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import cv2
import numpy as np

from gesim_ros.world_model.api import StepResult

JPEG_QUALITY = 95
MAX_BODY_BYTES = 256 * 1024 * 1024
_PREFIX = struct.Struct(">I")


class WireFormatError(ValueError):
    """A body or section is truncated, garbled, too large or inconsistent with its metadata."""


# --------------------------------------------------------------------------- sections


def pack_sections(sections: Iterable[bytes]) -> bytes:
    """Concatenate sections, each behind a 4-byte big-endian length prefix."""
    out = bytearray()
    for section in sections:
        out += _PREFIX.pack(len(section))
        out += section
        if len(out) > MAX_BODY_BYTES:
            raise WireFormatError(f"body exceeds MAX_BODY_BYTES={MAX_BODY_BYTES}")
    return bytes(out)


def unpack_sections(body: bytes, what: str = "body") -> list[bytes]:
    """Split a body into its sections; trailing or short data is an error, never ignored."""
    if len(body) > MAX_BODY_BYTES:
        raise WireFormatError(f"{what}: {len(body)} bytes exceed MAX_BODY_BYTES={MAX_BODY_BYTES}")
    view = memoryview(body)
    sections: list[bytes] = []
    pos = 0
    while pos < len(body):
        if len(body) - pos < _PREFIX.size:
            raise WireFormatError(
                f"{what}: truncated: {len(body) - pos} trailing byte(s) at offset {pos} "
                "cannot hold a 4-byte length prefix"
            )
        (size,) = _PREFIX.unpack_from(body, pos)
        pos += _PREFIX.size
        if size > len(body) - pos:
            raise WireFormatError(
                f"{what}: section {len(sections)} declares {size} bytes but only {len(body) - pos} remain "
                "(truncated, or not a length-prefixed body)"
            )
        sections.append(bytes(view[pos : pos + size]))
        pos += size
    return sections


def _expect_sections(body: bytes, count: int, what: str) -> list[bytes]:
    sections = unpack_sections(body, what)
    if len(sections) != count:
        raise WireFormatError(f"{what}: {len(sections)} section(s); expected {count}")
    return sections


# --------------------------------------------------------------------------- JSON and arrays


def encode_json(obj: Any) -> bytes:
    """Compact UTF-8 JSON; NaN/inf are refused because they are not JSON."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")


def decode_json(data: bytes, what: str) -> dict[str, Any]:
    """Parse a JSON object, naming ``what`` in the error."""
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireFormatError(f"{what}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise WireFormatError(f"{what}: expected a JSON object, got {type(obj).__name__}")
    return obj


def get_str(obj: dict[str, Any], key: str, what: str) -> str:
    """Fetch a required non-empty string field."""
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise WireFormatError(f"{what}: field {key!r} is {value!r}; expected a non-empty string")
    return value


def _get_shape(meta: dict[str, Any], key: str, ndims: Sequence[int], what: str) -> tuple[int, ...]:
    value = meta.get(key)
    if not (
        isinstance(value, list)
        and len(value) in ndims
        and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value)
    ):
        raise WireFormatError(
            f"{what}: meta {key!r} is {value!r}; expected a list of {' or '.join(map(str, ndims))} positive ints"
        )
    return tuple(value)


def _float32_bytes(arr: np.ndarray) -> bytes:
    return np.ascontiguousarray(arr, dtype="<f4").tobytes()


def _float32_array(data: bytes, shape: tuple[int, ...], what: str) -> np.ndarray:
    expected = 4 * math.prod(shape)
    if len(data) != expected:
        raise WireFormatError(f"{what}: {len(data)} bytes; expected {expected} for float32 shape {shape}")
    return np.frombuffer(data, dtype="<f4").reshape(shape).astype(np.float32)


def _numeric_array(value: Any, what: str) -> np.ndarray:
    try:
        return np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise WireFormatError(f"{what}: not a numeric (nested-list) array ({exc})") from None


# --------------------------------------------------------------------------- frames


def encode_frame_jpeg(frame: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    """Encode a ``(3, V, H, W)`` float ``[0, 1]`` frame as one horizontally tiled RGB JPEG."""
    arr = np.asarray(frame, dtype=np.float32)
    if arr.ndim != 4 or arr.shape[0] != 3:
        raise WireFormatError(f"frame: wrong shape {tuple(arr.shape)}; expected (3, V, H, W)")
    _, views, height, width = arr.shape
    tiled = arr.transpose(2, 1, 3, 0).reshape(height, views * width, 3)  # (H, V*W, RGB)
    rgb8 = (np.clip(tiled, 0.0, 1.0) * 255.0).round().astype(np.uint8)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb8, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise WireFormatError(f"frame: JPEG encoding of a {rgb8.shape} image failed")
    return buf.tobytes()


def decode_frame_jpeg(data: bytes, shape: Sequence[int], what: str = "frame") -> np.ndarray:
    """Decode a tiled JPEG back to ``shape = (3, V, H, W)`` float32 ``[0, 1]``."""
    _, views, height, width = shape
    bgr = None
    if data:
        try:
            bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
        except cv2.error:
            bgr = None
    if bgr is None:
        raise WireFormatError(f"{what}: {len(data)} bytes are not a decodable JPEG")
    if bgr.shape != (height, views * width, 3):
        raise WireFormatError(
            f"{what}: JPEG is {bgr.shape[1]}x{bgr.shape[0]}; expected {views * width}x{height} "
            f"({views} views of {width}x{height} tiled horizontally) for frame shape {tuple(shape)}"
        )
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).reshape(height, views, width, 3)
    return np.ascontiguousarray(rgb.transpose(3, 1, 0, 2), dtype=np.float32) / np.float32(255.0)


def _frame_shape(meta: dict[str, Any], key: str, ndims: Sequence[int], channel_axis: int, what: str) -> tuple[int, ...]:
    shape = _get_shape(meta, key, ndims, what)
    if shape[channel_axis] != 3:
        raise WireFormatError(
            f"{what}: meta {key!r} is {list(shape)}; expected 3 colour channels at axis {channel_axis}"
        )
    return shape


# --------------------------------------------------------------------------- /set_episode_data


def encode_episode_data(first_frame: np.ndarray, client_id: str) -> bytes:
    """Body: [JPEG of the first frame][meta {frame_shape, client_id}]."""
    jpeg = encode_frame_jpeg(first_frame)
    meta = {"frame_shape": list(np.shape(first_frame)), "client_id": client_id}
    return pack_sections([jpeg, encode_json(meta)])


def decode_episode_data(body: bytes) -> tuple[str, np.ndarray]:
    """Return ``(client_id, first_frame (3, V, H, W))``."""
    what = "/set_episode_data body"
    jpeg, meta_bytes = _expect_sections(body, 2, what)
    meta = decode_json(meta_bytes, f"{what} meta")
    shape = _frame_shape(meta, "frame_shape", (4,), 0, what)
    return get_str(meta, "client_id", what), decode_frame_jpeg(jpeg, shape, f"{what} first frame")


# --------------------------------------------------------------------------- /set_episode_traj


def encode_episode_traj(traj: np.ndarray, c2w: np.ndarray, client_id: str) -> bytes:
    """Body: [section of T band-frame JPEG sections][float32 c2w][meta {traj_shape, c2w_shape, client_id}]."""
    traj = np.asarray(traj, dtype=np.float32)
    if traj.ndim != 5 or traj.shape[0] != 3:
        raise WireFormatError(f"traj: wrong shape {tuple(traj.shape)}; expected (3, V, T, H, W)")
    band = pack_sections(encode_frame_jpeg(traj[:, :, t]) for t in range(traj.shape[2]))
    meta = {"traj_shape": list(traj.shape), "c2w_shape": list(np.shape(c2w)), "client_id": client_id}
    return pack_sections([band, _float32_bytes(c2w), encode_json(meta)])


def decode_episode_traj(body: bytes) -> tuple[str, np.ndarray, np.ndarray]:
    """Return ``(client_id, traj (3, V, T, H, W), c2w)``."""
    what = "/set_episode_traj body"
    band, c2w_bytes, meta_bytes = _expect_sections(body, 3, what)
    meta = decode_json(meta_bytes, f"{what} meta")
    client_id = get_str(meta, "client_id", what)
    _, views, steps, height, width = _frame_shape(meta, "traj_shape", (5,), 0, what)
    c2w_shape = _get_shape(meta, "c2w_shape", (4,), what)
    jpegs = unpack_sections(band, f"{what} band section")
    if len(jpegs) != steps:
        raise WireFormatError(f"{what}: {len(jpegs)} band frame(s); traj_shape says T={steps}")
    frames = [decode_frame_jpeg(j, (3, views, height, width), f"{what} band frame {t}") for t, j in enumerate(jpegs)]
    return client_id, np.stack(frames, axis=2), _float32_array(c2w_bytes, c2w_shape, f"{what} c2w")


# --------------------------------------------------------------------------- /step


def encode_step_request(actions: np.ndarray, client_id: str) -> bytes:
    """Body: [float32 actions][meta {action_shape, client_id}]."""
    meta = {"action_shape": list(np.shape(actions)), "client_id": client_id}
    return pack_sections([_float32_bytes(actions), encode_json(meta)])


def decode_step_request(body: bytes) -> tuple[str, np.ndarray]:
    """Return ``(client_id, actions (L, D))``."""
    what = "/step body"
    data, meta_bytes = _expect_sections(body, 2, what)
    meta = decode_json(meta_bytes, f"{what} meta")
    client_id = get_str(meta, "client_id", what)
    shape = _get_shape(meta, "action_shape", (2,), what)
    return client_id, _float32_array(data, shape, f"{what} actions")


def encode_step_response(result: StepResult) -> bytes:
    """Body: [meta {frame_shape (T, 3, V, H, W), state_shape}][T frame JPEGs][float32 state, empty if none]."""
    frames = np.asarray(result.frames, dtype=np.float32)
    if frames.ndim != 5 or frames.shape[1] != 3:
        raise WireFormatError(f"frames: wrong shape {tuple(frames.shape)}; expected (T, 3, V, H, W)")
    state_shape = None if result.state is None else list(np.shape(result.state))
    meta = {"frame_shape": list(frames.shape), "state_shape": state_shape}
    state_bytes = b"" if result.state is None else _float32_bytes(result.state)
    return pack_sections([encode_json(meta), *(encode_frame_jpeg(f) for f in frames), state_bytes])


def decode_step_response(body: bytes) -> StepResult:
    """Parse a /step response into a :class:`StepResult`.

    ``frame_shape`` may be the full ``(T, 3, V, H, W)`` or per-frame ``(3, V, H, W)``;
    T always comes from the number of JPEG sections and must agree with the meta.
    """
    what = "/step response"
    sections = unpack_sections(body, what)
    if len(sections) < 3:
        raise WireFormatError(f"{what}: {len(sections)} section(s); expected meta, >= 1 frame JPEG and a state section")
    meta = decode_json(sections[0], f"{what} meta")
    jpegs, state_bytes = sections[1:-1], sections[-1]
    shape = _get_shape(meta, "frame_shape", (4, 5), what)
    if shape[-4] != 3 or (len(shape) == 5 and shape[0] != len(jpegs)):
        raise WireFormatError(
            f"{what}: frame_shape {list(shape)} does not fit {len(jpegs)} frame JPEG(s) of 3 channels"
        )
    frames = np.stack([decode_frame_jpeg(j, shape[-4:], f"{what} frame {t}") for t, j in enumerate(jpegs)])
    if meta.get("state_shape") is None:
        if state_bytes:
            raise WireFormatError(f"{what}: state_shape is null but the state section holds {len(state_bytes)} bytes")
        return StepResult(frames, None)
    state_shape = _get_shape(meta, "state_shape", (2,), what)
    return StepResult(frames, _float32_array(state_bytes, state_shape, f"{what} state"))


# --------------------------------------------------------------------------- JSON endpoints


def encode_episode_state(state: np.ndarray, client_id: str) -> bytes:
    """JSON body {state (D,), client_id} of ``/set_episode_state`` (serve-wm's, not GE-Sim-V2's)."""
    return encode_json({"state": np.asarray(state, dtype=np.float32).tolist(), "client_id": client_id})


def decode_episode_state(body: bytes) -> tuple[str, np.ndarray]:
    """Return ``(client_id, state)``; its shape is checked by the caller."""
    what = "/set_episode_state body"
    obj = decode_json(body, what)
    return get_str(obj, "client_id", what), _numeric_array(obj.get("state"), f"{what} state")


def encode_camera_params(intrinsic: np.ndarray, extrinsic: np.ndarray | None, client_id: str) -> bytes:
    """JSON body {intrinsic, extrinsic (or null), client_id}; float32 values survive exactly."""
    body = {
        "intrinsic": np.asarray(intrinsic, dtype=np.float32).tolist(),
        "extrinsic": None if extrinsic is None else np.asarray(extrinsic, dtype=np.float32).tolist(),
        "client_id": client_id,
    }
    return encode_json(body)


def decode_camera_params(body: bytes) -> tuple[str, np.ndarray, np.ndarray | None]:
    """Return ``(client_id, intrinsic, extrinsic or None)``; shapes are checked by the caller."""
    what = "/set_camera_params body"
    obj = decode_json(body, what)
    client_id = get_str(obj, "client_id", what)
    intrinsic = _numeric_array(obj.get("intrinsic"), f"{what} intrinsic")
    extrinsic = obj.get("extrinsic")
    return client_id, intrinsic, None if extrinsic is None else _numeric_array(extrinsic, f"{what} extrinsic")


# --------------------------------------------------------------------------- /evaluate


def encode_evaluate_request(head_frames: np.ndarray, task: str) -> bytes:
    """Body: [section of T head-frame JPEG sections][meta {frames_shape (T, H, W, 3), task}]."""
    frames = np.asarray(head_frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or not frames.shape[0]:
        raise WireFormatError(f"head_frames: {frames.dtype} array of shape {tuple(frames.shape)}; expected "
                              "(T>=1, H, W, 3) uint8 RGB")
    if not isinstance(task, str):
        raise WireFormatError(f"task: expected a string, got {type(task).__name__}")
    # One view of (3, 1, H, W) in [0, 1]: encode_frame_jpeg's x255 rounding gives back the exact pixels.
    jpegs = pack_sections(encode_frame_jpeg(f.transpose(2, 0, 1)[:, None] / np.float32(255.0)) for f in frames)
    return pack_sections([jpegs, encode_json({"frames_shape": list(frames.shape), "task": task})])


def decode_evaluate_request(body: bytes) -> tuple[str, np.ndarray]:
    """Return ``(task, head_frames (T, H, W, 3) uint8)``."""
    what = "/evaluate body"
    jpeg_section, meta_bytes = _expect_sections(body, 2, what)
    meta = decode_json(meta_bytes, f"{what} meta")
    task = meta.get("task")
    if not isinstance(task, str):
        raise WireFormatError(f"{what}: field 'task' is {task!r}; expected a string")
    steps, height, width, _ = _frame_shape(meta, "frames_shape", (4,), 3, what)
    jpegs = unpack_sections(jpeg_section, f"{what} frames section")
    if len(jpegs) != steps:
        raise WireFormatError(f"{what}: {len(jpegs)} frame JPEG(s); frames_shape says T={steps}")
    frames = np.stack([decode_frame_jpeg(j, (3, 1, height, width), f"{what} frame {t}") for t, j in enumerate(jpegs)])
    return task, np.round(frames[:, :, 0].transpose(0, 2, 3, 1) * 255.0).astype(np.uint8)


def encode_evaluate_response(success: np.ndarray, progress: np.ndarray) -> bytes:
    """JSON body {success (T,), progress (T,)}."""
    return encode_json({"success": np.asarray(success, dtype=np.float32).tolist(),
                        "progress": np.asarray(progress, dtype=np.float32).tolist()})


def decode_evaluate_response(body: bytes, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(success, progress)``, each ``(steps,)`` float32 (one value per frame sent)."""
    what = "/evaluate response"
    obj = decode_json(body, what)
    arrays = tuple(_numeric_array(obj.get(key), f"{what} {key}") for key in ("success", "progress"))
    for key, arr in zip(("success", "progress"), arrays):
        if arr.shape != (steps,):
            raise WireFormatError(f"{what}: {key} has shape {tuple(arr.shape)}; expected ({steps},), one value "
                                  "per frame sent")
    return arrays

"""numpy <-> sensor_msgs/Image and CompressedImage, with cv_bridge's encoding names and semantics.

Colour arrays are (H, W, 3) in the message's channel order (rgb8 is RGB, bgr8 is BGR), mono8 is
(H, W) uint8, 16UC1 is (H, W) uint16 (depth in millimetres), 32FC1 is (H, W) float32 (depth in
metres). ``rgb_from_camera_msg`` is the one way a colour camera's message becomes RGB, whatever its
encoding; depth has no RGB and is refused. On a ROS workstation with cv_bridge importable, raw images go through cv_bridge; otherwise
through the converter below, which the tests hold to the same results. Receiving views the message
buffer without copying; sending copies the array once into the message.

This module builds message objects but never touches rclpy: it only needs sensor_msgs.
"""

from __future__ import annotations

import array

import cv2
import numpy as np

#: encoding -> (dtype, channels)
ENCODINGS: dict[str, tuple[np.dtype, int]] = {
    "rgb8": (np.dtype(np.uint8), 3),
    "bgr8": (np.dtype(np.uint8), 3),
    "rgba8": (np.dtype(np.uint8), 4),
    "mono8": (np.dtype(np.uint8), 1),
    "16UC1": (np.dtype(np.uint16), 1),
    "32FC1": (np.dtype(np.float32), 1),
}
COMPRESSED_FORMATS = ("jpeg", "png")
#: Image encoding -> OpenCV conversion to RGB (None: already RGB); depth encodings have none
_TO_RGB = {"rgb8": None, "bgr8": cv2.COLOR_BGR2RGB, "rgba8": cv2.COLOR_RGBA2RGB, "mono8": cv2.COLOR_GRAY2RGB}
#: contract encodings (contract.IMAGE_ENCODINGS) of a camera that ``rgb_from_camera_msg`` turns into RGB
COLOUR_ENCODINGS = (*_TO_RGB, *COMPRESSED_FORMATS)

try:  # a ROS workstation has cv_bridge; the pip set-up does not
    from cv_bridge import CvBridge
    _BRIDGE = CvBridge()
except ImportError:
    _BRIDGE = None


class ImageCodecError(ValueError):
    """An image or message does not match its declared encoding."""


def _check_array(image: np.ndarray, encoding: str) -> np.ndarray:
    if encoding not in ENCODINGS:
        raise ImageCodecError(f"encoding '{encoding}' is not supported; use one of {', '.join(ENCODINGS)}")
    dtype, channels = ENCODINGS[encoding]
    expected = (channels,) if channels > 1 else ()
    if image.dtype != dtype or image.ndim != 2 + bool(expected) or image.shape[2:] != expected:
        want = f"(H, W{', %d' % channels if channels > 1 else ''}) {dtype}"
        raise ImageCodecError(f"{encoding} image must be {want}, got {image.shape} {image.dtype}")
    return np.ascontiguousarray(image)


def _as_byte_array(data) -> array.array:
    out = array.array("B")
    out.frombytes(memoryview(data).cast("B"))
    return out


def to_image_msg(image: np.ndarray, encoding: str, header=None):
    """sensor_msgs/Image from an array in ``encoding`` (one copy of the pixels)."""
    from sensor_msgs.msg import Image

    image = _check_array(image, encoding)
    if _BRIDGE is not None:
        msg = _BRIDGE.cv2_to_imgmsg(image, encoding=encoding)
    else:
        msg = Image()
        msg.height, msg.width = image.shape[:2]
        msg.encoding = encoding
        msg.is_bigendian = int(np.little_endian is False)
        msg.step = image.strides[0]
        msg.data = _as_byte_array(image)
    if header is not None:
        msg.header = header
    return msg


def from_image_msg(msg) -> np.ndarray:
    """View of a sensor_msgs/Image's pixels as an array (no copy where the rows are unpadded)."""
    if msg.encoding not in ENCODINGS:
        raise ImageCodecError(f"Image encoding '{msg.encoding}' is not supported; "
                              f"use one of {', '.join(ENCODINGS)}")
    if _BRIDGE is not None:
        return _BRIDGE.imgmsg_to_cv2(msg, desired_encoding="passthrough")
    dtype, channels = ENCODINGS[msg.encoding]
    dtype = dtype.newbyteorder(">" if msg.is_bigendian else "<")
    row_bytes = msg.width * channels * dtype.itemsize
    if msg.step < row_bytes or len(msg.data) < msg.step * msg.height:
        raise ImageCodecError(f"Image of {msg.width}x{msg.height} {msg.encoding} needs step >= {row_bytes} "
                              f"and {msg.step * msg.height} bytes; got step {msg.step}, {len(msg.data)} bytes")
    raw = np.frombuffer(msg.data, np.uint8, count=msg.step * msg.height).reshape(msg.height, msg.step)
    pixels = raw[:, :row_bytes].view(dtype)
    shape = (msg.height, msg.width, channels) if channels > 1 else (msg.height, msg.width)
    pixels = pixels.reshape(shape)
    return pixels if dtype.isnative else pixels.astype(dtype.newbyteorder("="))


def encode_compressed(image: np.ndarray, encoding: str, fmt: str = "jpeg", quality: int = 90) -> bytes:
    """JPEG/PNG bytes of an array in ``encoding`` (colour is stored BGR in the file, as OpenCV does)."""
    image = _check_array(image, encoding)
    if fmt not in COMPRESSED_FORMATS:
        raise ImageCodecError(f"compressed format '{fmt}' is not supported; use one of {COMPRESSED_FORMATS}")
    if fmt == "jpeg" and encoding not in ("rgb8", "bgr8", "mono8"):
        raise ImageCodecError(f"JPEG holds 8-bit colour or mono images, not {encoding}; use png")
    if encoding == "rgb8":
        image = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    elif encoding == "rgba8":
        image = cv2.cvtColor(image, cv2.COLOR_RGBA2BGRA)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if fmt == "jpeg" else [cv2.IMWRITE_PNG_COMPRESSION, 1]
    ok, buf = cv2.imencode(".jpg" if fmt == "jpeg" else ".png", image, params)
    if not ok:
        raise ImageCodecError(f"OpenCV could not encode a {image.shape} {encoding} image as {fmt}")
    return buf.tobytes()


def decode_compressed(data, encoding: str) -> np.ndarray:
    """Array in ``encoding`` from JPEG/PNG bytes (any bytes-like object)."""
    if encoding not in ENCODINGS:
        raise ImageCodecError(f"encoding '{encoding}' is not supported; use one of {', '.join(ENCODINGS)}")
    flags = cv2.IMREAD_UNCHANGED if encoding in ("16UC1", "32FC1", "rgba8") else (
        cv2.IMREAD_GRAYSCALE if encoding == "mono8" else cv2.IMREAD_COLOR)
    # ANYDEPTH keeps a 16-bit PNG 16-bit, so it is refused below instead of quietly cut to 8 bits
    image = cv2.imdecode(np.frombuffer(data, np.uint8), flags | cv2.IMREAD_ANYDEPTH)
    if image is None:
        raise ImageCodecError("compressed image data could not be decoded (not a valid JPEG/PNG)")
    if image.dtype != ENCODINGS[encoding][0]:
        raise ImageCodecError(f"compressed image holds {image.dtype} pixels, not the {ENCODINGS[encoding][0]} "
                              f"of {encoding}; decode it in the encoding it was stored in (e.g. 16UC1 for depth)")
    if encoding == "rgb8":
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    elif encoding == "rgba8":
        image = cv2.cvtColor(image, cv2.COLOR_BGRA2RGBA)
    return _check_array(image, encoding)


def to_compressed_msg(image: np.ndarray, encoding: str, fmt: str = "jpeg", quality: int = 90, header=None):
    """sensor_msgs/CompressedImage; ``format`` follows image_transport ("rgb8; jpeg compressed bgr8")."""
    from sensor_msgs.msg import CompressedImage

    msg = CompressedImage()
    stored = "bgr8" if encoding in ("rgb8", "bgr8") else encoding
    msg.format = f"{encoding}; {fmt} compressed {stored}"
    msg.data = _as_byte_array(encode_compressed(image, encoding, fmt, quality))
    if header is not None:
        msg.header = header
    return msg


def from_compressed_msg(msg, encoding: str | None = None) -> np.ndarray:
    """Decode a CompressedImage to ``encoding`` (default: the one its ``format`` names, else rgb8)."""
    if encoding is None:
        declared = msg.format.split(";")[0].strip()
        encoding = declared if declared in ENCODINGS else "rgb8"
    return decode_compressed(msg.data, encoding)


def colour_camera_msg(rgb: np.ndarray, msg_type: str, encoding: str, quality: int = 90, header=None):
    """A colour camera's message from an RGB array: CompressedImage (``encoding`` jpeg/png) or Image
    (rgb8, or bgr8 with the channels swapped), as the contract's ``msg_type`` and ``encoding`` say."""
    if msg_type.endswith("CompressedImage"):
        return to_compressed_msg(rgb, "rgb8", encoding, quality, header=header)
    return to_image_msg(rgb if encoding == "rgb8" else np.ascontiguousarray(rgb[..., ::-1]), encoding, header)


def rgb_from_camera_msg(msg, source: str = "") -> np.ndarray:
    """(H, W, 3) uint8 RGB of a colour camera's message: an Image in rgb8 (a view of the buffer), bgr8,
    rgba8 (alpha dropped) or mono8 (grey in all three channels), or a JPEG/PNG CompressedImage.
    Depth (16UC1, 32FC1) has no RGB and is refused; ``source`` (e.g. the topic) prefixes every error."""
    try:
        if hasattr(msg, "format"):  # CompressedImage: the file says what it holds
            return decode_compressed(msg.data, "rgb8")
        if msg.encoding not in _TO_RGB:
            what = "is depth, which has no RGB" if msg.encoding in ("16UC1", "32FC1") else "is not a colour encoding"
            raise ImageCodecError(f"Image encoding '{msg.encoding}' {what}; a colour camera publishes "
                                  f"{', '.join(_TO_RGB)} or a {'/'.join(COMPRESSED_FORMATS)} CompressedImage")
        image = from_image_msg(msg)
    except ImageCodecError as exc:
        raise ImageCodecError(f"{source}: {exc}" if source else str(exc)) from None
    code = _TO_RGB[msg.encoding]
    return image if code is None else cv2.cvtColor(np.ascontiguousarray(image), code)

"""How close a predicted camera frame is to the real one: PSNR and SSIM on uint8 RGB arrays.

SSIM follows Wang et al. (2004) and their reference implementation: an 11x11 Gaussian window with
sigma 1.5, K1 = 0.01, K2 = 0.03, L = 255, averaged over the window positions that lie wholly inside
the image ('valid' filtering, so borders are not invented). It is computed on luminance
(ITU-R BT.601 Y), not per channel: a third of the filtering, which keeps the comparator's CPU low,
and world-model errors show as structure errors in Y anyway. PSNR uses all three channels.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

WINDOW = 11
SIGMA = 1.5
K1, K2 = 0.01, 0.03
PEAK = 255.0
_C1, _C2 = (K1 * PEAK) ** 2, (K2 * PEAK) ** 2
_LUMA = np.array([0.299, 0.587, 0.114], np.float32)  # BT.601; sums to 1, so gray stays gray
_KERNEL = cv2.getGaussianKernel(WINDOW, SIGMA, cv2.CV_32F)


class ImageMetricError(ValueError):
    """The two images cannot be compared as given."""


def _rgb(image: np.ndarray, name: str) -> np.ndarray:
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        got = f"{image.shape} {image.dtype}" if isinstance(image, np.ndarray) else type(image).__name__
        raise ImageMetricError(f"{name} must be a uint8 RGB array (H, W, 3), got {got}; "
                               "decode the frame with image_codec (encoding rgb8) first")
    return image


def _pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = _rgb(a, "a"), _rgb(b, "b")
    if a.shape != b.shape:
        raise ImageMetricError(f"images differ in size: a is {a.shape}, b is {b.shape}; bring them "
                               "to one size first with match_resolution(a, b)")
    return a, b


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB over all pixels and channels; inf for identical images."""
    a, b = _pair(a, b)
    mse = cv2.norm(a, b, cv2.NORM_L2SQR) / a.size  # exact: integer squares summed in double
    return math.inf if mse == 0.0 else 10.0 * math.log10(PEAK * PEAK / mse)


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean structural similarity of the luminance, in [-1, 1]; 1.0 for identical images."""
    a, b = _pair(a, b)
    if min(a.shape[:2]) < WINDOW:
        raise ImageMetricError(f"images of {a.shape[1]}x{a.shape[0]} are smaller than the "
                               f"{WINDOW}x{WINDOW} SSIM window; compare frames of at least that size")
    x, y = (img.astype(np.float32) @ _LUMA for img in (a, b))

    def window_mean(z: np.ndarray) -> np.ndarray:
        half = WINDOW // 2
        return cv2.sepFilter2D(z, cv2.CV_32F, _KERNEL, _KERNEL)[half:-half, half:-half]

    mu_x, mu_y = window_mean(x), window_mean(y)
    var_x = window_mean(x * x) - mu_x * mu_x
    var_y = window_mean(y * y) - mu_y * mu_y
    cov = window_mean(x * y) - mu_x * mu_y
    ssim_map = ((2 * mu_x * mu_y + _C1) * (2 * cov + _C2)) / (
        (mu_x * mu_x + mu_y * mu_y + _C1) * (var_x + var_y + _C2))
    return float(np.clip(ssim_map.mean(dtype=np.float64), -1.0, 1.0))


def match_resolution(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both images at the smaller of the two resolutions (area-averaged), so no pixels are invented."""
    a, b = _rgb(a, "a"), _rgb(b, "b")
    height, width = min(a.shape[0], b.shape[0]), min(a.shape[1], b.shape[1])

    def fit(img: np.ndarray) -> np.ndarray:
        if img.shape[:2] == (height, width):
            return img
        return cv2.resize(img, (width, height), interpolation=cv2.INTER_AREA)

    return fit(a), fit(b)

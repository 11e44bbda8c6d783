"""A synthetic first-person camera image: a room with a target object and a look-alike distractor.

Used as the embedded default camera when no device, video or image folder is given.
"""

from __future__ import annotations

import cv2
import numpy as np

COLOURS_BGR = {
    "silver": (192, 192, 192),
    "red": (40, 40, 210),
    "green": (60, 170, 60),
    "blue": (200, 90, 40),
    "yellow": (40, 210, 230),
    "grey": (128, 128, 128),
}


def synthetic_camera_image(width: int = 224, height: int = 168, seed: int = 0) -> np.ndarray:
    """Render an RGB uint8 image (height, width, 3): floor, wall, a silver bottle and a grey bottle."""
    rng = np.random.default_rng(seed)
    img = np.zeros((height, width, 3), np.uint8)
    horizon = height // 2
    img[:horizon] = (200, 215, 225)  # wall
    img[horizon:] = (70, 95, 120)  # floor
    for y in range(horizon, height, max(4, height // 12)):
        cv2.line(img, (0, y), (width - 1, y), (60, 85, 110), 1)
    positions = rng.permutation([int(width * 0.25), int(width * 0.7)])
    for x, colour in zip(positions, ("silver", "grey")):
        h = int(height * 0.3)
        top = horizon + int(height * 0.1) - h // 2
        cv2.rectangle(img, (x - 8, top + 10), (x + 8, top + h), COLOURS_BGR[colour], -1)
        cv2.rectangle(img, (x - 4, top), (x + 4, top + 10), COLOURS_BGR[colour], -1)
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)

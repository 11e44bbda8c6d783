"""A 2-D room with coloured objects, a robot pose and a first-person camera rendered with OpenCV.

No ROS here: ``World.step`` integrates a velocity command (unicycle kinematics, walls stop the
robot), ``World.render`` draws what a forward-facing pinhole camera at the robot would see (floor,
walls, objects far to near), and the goal tests measure distance and bearing to the named target.
Poses follow REP 103: x forward, y left, θ counter-clockwise from +x.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

import cv2
import numpy as np

from edge_spec_ros.nav.motion import PlanarPose as Pose  # the robot's pose in the room frame

COLOURS_RGB = {
    "red": (210, 40, 40), "green": (50, 170, 60), "blue": (40, 90, 210), "yellow": (230, 210, 40),
    "silver": (200, 200, 205), "grey": (120, 120, 125), "orange": (240, 140, 30), "purple": (140, 60, 170),
}
# (width, height) in metres: objects a legged robot is sent to, large enough to be told apart from
# a few metres away in the 112 x 84 image the model sees (one image token per 28 x 28 px)
SHAPES = {"bottle": (0.25, 0.6), "box": (0.6, 0.45), "chair": (0.6, 0.9), "ball": (0.45, 0.45), "cone": (0.4, 0.6)}
WALL_RGB, FLOOR_RGB = (70, 85, 110), (120, 95, 70)  # a dark wall: silver and grey objects stand out


@dataclass(frozen=True)
class WorldObject:
    colour: str
    kind: str
    x: float
    y: float

    @property
    def name(self) -> str:
        return f"{self.colour} {self.kind}"

    @property
    def size(self) -> tuple[float, float]:
        """(width, height) in metres."""
        return SHAPES[self.kind]


@dataclass(frozen=True)
class WorldConfig:
    width_m: float = 6.0  # room extent along x
    depth_m: float = 6.0  # room extent along y
    fov_rad: float = math.radians(70)
    camera_height_m: float = 0.35  # the Go2's head camera
    image_width: int = 224
    image_height: int = 168
    robot_radius_m: float = 0.25
    # success: the robot's centre within this distance of the target's surface, facing it (the
    # 1 m success distance of Habitat's ObjectNav; the expert itself stops closer, sim/expert.py)
    reach_m: float = 1.0


@dataclass
class World:
    objects: list[WorldObject]
    pose: Pose
    config: WorldConfig = field(default_factory=WorldConfig)

    @classmethod
    def random(cls, seed: int, target: str = "", distractors: int = 2, config: WorldConfig | None = None) -> World:
        """A room with a target object and look-alike distractors (same kind in another colour, or
        same colour on another kind), placed apart, and the robot at one side facing a random way."""
        config = config or WorldConfig()
        rng = random.Random(seed)
        colour, kind = target.split(" ", 1) if target else (rng.choice(list(COLOURS_RGB)), rng.choice(list(SHAPES)))
        names = [(colour, kind)]
        while len(names) < 1 + distractors:
            other = (rng.choice([c for c in COLOURS_RGB if c != colour]), kind) if rng.random() < 0.6 else \
                (colour, rng.choice([k for k in SHAPES if k != kind]))
            if other not in names:
                names.append(other)
        pose = Pose(0.6, rng.uniform(1.0, config.depth_m - 1.0), rng.uniform(-math.pi / 2, math.pi / 2))
        objects: list[WorldObject] = []
        while len(objects) < len(names):
            x, y = rng.uniform(2.0, config.width_m - 0.5), rng.uniform(0.5, config.depth_m - 0.5)
            apart = all(math.hypot(x - o.x, y - o.y) > 1.0 for o in objects)
            # distractors keep clear of the straight way to the target: a robot that walks at its
            # target never has to plan around an obstacle (there is no such action in the grammar)
            clear = not objects or _segment_distance((x, y), (pose.x, pose.y), (objects[0].x, objects[0].y)) > 0.7
            if apart and clear:
                objects.append(WorldObject(*names[len(objects)], x, y))
        return cls(objects, pose, config)

    def target(self, name: str) -> WorldObject:
        for o in self.objects:
            if o.name == name:
                return o
        raise KeyError(f"no {name!r} in this world; it has {[o.name for o in self.objects]}")

    def step(self, linear_x: float, angular_z: float, dt: float) -> None:
        """Unicycle kinematics over ``dt``; the robot stops at walls and objects instead of entering them."""
        if not (math.isfinite(linear_x) and math.isfinite(angular_z) and dt >= 0):
            return
        p = self.pose
        theta = p.theta + angular_z * dt
        x = p.x + linear_x * dt * math.cos(theta)
        y = p.y + linear_x * dt * math.sin(theta)
        r = self.config.robot_radius_m
        blocked = not (r <= x <= self.config.width_m - r and r <= y <= self.config.depth_m - r) or any(
            math.hypot(x - o.x, y - o.y) < r + o.size[0] / 2 for o in self.objects)
        self.pose = replace(p, theta=math.atan2(math.sin(theta), math.cos(theta)),
                            **({} if blocked else {"x": x, "y": y}))

    def relative(self, obj: WorldObject) -> tuple[float, float]:
        """(distance m, bearing rad, left positive) from the robot to ``obj``."""
        dx, dy = obj.x - self.pose.x, obj.y - self.pose.y
        bearing = math.atan2(dy, dx) - self.pose.theta
        return math.hypot(dx, dy), math.atan2(math.sin(bearing), math.cos(bearing))

    def reached(self, name: str) -> bool:
        distance, bearing = self.relative(self.target(name))
        surface = distance - self.target(name).size[0] / 2
        return surface <= self.config.reach_m and abs(bearing) < self.config.fov_rad / 2

    def render(self) -> np.ndarray:
        """First-person RGB image (H, W, 3) uint8."""
        c = self.config
        w, h = c.image_width, c.image_height
        focal = (w / 2) / math.tan(c.fov_rad / 2)
        horizon = h // 2
        img = np.empty((h, w, 3), np.uint8)
        img[:horizon] = WALL_RGB
        img[horizon:] = FLOOR_RGB
        visible = []
        for o in self.objects:
            distance, bearing = self.relative(o)
            if distance > 0.15 and abs(bearing) < c.fov_rad / 2 + 0.3:
                visible.append((distance, bearing, o))
        for distance, bearing, o in sorted(visible, key=lambda v: -v[0]):
            depth = distance * math.cos(bearing)
            if depth <= 0.1:
                continue
            u = w / 2 - focal * math.tan(bearing)
            width_px = focal * o.size[0] / depth
            bottom = horizon + focal * c.camera_height_m / depth
            top = bottom - focal * o.size[1] / depth
            colour = COLOURS_RGB[o.colour]
            x0, x1 = int(round(u - width_px / 2)), int(round(u + width_px / 2))
            if o.kind == "ball":
                radius = max(1, int(width_px / 2))
                cv2.circle(img, (int(u), int(bottom - radius)), radius, colour, -1)
            elif o.kind == "cone":
                pts = np.array([[x0, int(bottom)], [x1, int(bottom)], [int(u), int(top)]], np.int32)
                cv2.fillPoly(img, [pts], colour)
            else:
                cv2.rectangle(img, (x0, int(top)), (x1, int(bottom)), colour, -1)
                if o.kind == "bottle":  # a neck
                    neck = max(1, int(width_px / 4))
                    cv2.rectangle(img, (int(u) - neck, int(top - width_px)), (int(u) + neck, int(top)), colour, -1)
        return img


def _segment_distance(p: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    """Distance from point p to the segment a-b."""
    (px, py), (ax, ay), (bx, by) = p, a, b
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy or 1.0)))
    return math.hypot(px - ax - t * dx, py - ay - t * dy)

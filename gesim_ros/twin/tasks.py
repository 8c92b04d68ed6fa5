"""Tasks for the G2 twin: seeded domain randomisation, the task's objects, its human task text, and
a ground-truth checker that labels how an episode ended.

The labels are what the world model's "rich interaction" data and the shadow-mode comparator are
keyed on, so each one is decided from physics, not from what the controller intended:

- ``success``: the task's goal holds (and no hard collision happened on the way);
- ``collision``: the robot pressed on a static obstacle (table, bin, socket housing) harder than
  ``COLLISION_FORCE_N``, or on the object with something other than its finger pads harder than
  ``PRESS_FORCE_N`` (normal forces summed over all contact points of that kind); the episode stops
  there, as a lab's safety stop would;
- ``knocked_over``: the object tipped over, or was shoved away without ever being grasped;
- ``slip_drop``: the object was held between both pads but did not stay held to the goal;
- ``missed_grasp``: the gripper closed narrower than the object without ever holding it;
- ``missed_contact`` / ``missed_target`` (push): the hand never touched the block / the block moved
  but did not end in the target area;
- ``timeout``: none of the above happened before the time limit (e.g. the robot never tried).

While an episode runs and its goal does not hold yet, the outcome is ``in_progress``.

Seeds from ``SCENE_VARIATION_BASE`` up are the rich-interaction recipe's varied scenes: seed
``SCENE_VARIATION_BASE + k`` is seed k's scene (same arm, lights and cameras) with the task object's
pose, size, mass and friction (and the task's own physics: push distance, extraction force)
perturbed, drawn from a stream of its own, so seeds below it keep their scenes draw for draw.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from gesim_ros.twin import scene as ts
from gesim_ros.twin.scene import mujoco

LABELS = ("success", "collision", "knocked_over", "slip_drop", "missed_grasp", "missed_contact",
          "missed_target", "timeout", "in_progress")
COLLISION_FORCE_N = 20.0   # robot on table/bin/housing: a clean episode never touches them
PRESS_FORCE_N = 25.0       # robot (not a pad) pressing on the object: clean pushes stay < 10 N
GRASP_MIN_S = 0.1          # both pads on the object this long counts as "was grasped"
MONITOR_HZ = 100.0
SCENE_VARIATION_BASE = 1_000_000


@dataclass(frozen=True)
class EpisodeSpec:
    """What an episode is: enough to rebuild its scene exactly (the controllers do)."""
    task: str
    seed: int
    task_text: str
    side: str                       # the arm that does the task: 'left' or 'right'
    time_limit_s: float
    randomisation: dict[str, Any]   # {'scene': SceneParams fields, 'task': task parameters}

    @property
    def scene(self) -> ts.SceneParams:
        return ts.SceneParams(**self.randomisation["scene"])

    @property
    def params(self) -> dict[str, Any]:
        return self.randomisation["task"]


@dataclass(frozen=True)
class TaskOutcome:
    """The checker's verdict: success, a label from LABELS, and the measurements behind it."""
    success: bool
    label: str
    details: dict[str, float] = field(default_factory=dict)


def _f(x) -> float:
    return round(float(x), 6)


def _quat_z(yaw: float) -> str:
    return f"{math.cos(yaw / 2):.6g} 0 0 {math.sin(yaw / 2):.6g}"


class Task:
    """One task: how to randomise it, its MJCF, and how to judge it. Subclasses fill the hooks."""
    name: str
    text: str
    time_limit_s: float
    object_body: str

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        raise NotImplementedError

    def vary(self, p: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        """``p`` (a sample) with the object's pose and physical properties perturbed."""
        raise NotImplementedError

    def goal_point(self, mon: EpisodeMonitor) -> np.ndarray:
        """Where the object's centre is once the goal holds (world frame, m)."""
        raise NotImplementedError

    def xml(self, p: dict[str, Any]) -> ts.TaskXml:
        raise NotImplementedError

    def grip_width(self, p: dict[str, Any]) -> float:
        """Object width between the pads; a gripper closed below it without holding missed."""
        raise NotImplementedError

    def half_extents(self, p: dict[str, Any]) -> tuple[float, float, float]:
        """The task object's half sizes along its own x, y, z (m; the plug's part above the housing)."""
        raise NotImplementedError

    def goal_reached(self, mon: EpisodeMonitor) -> bool:
        raise NotImplementedError

    def failure_label(self, mon: EpisodeMonitor) -> str:
        """The label once the goal did not hold in time; collisions are decided before this."""
        raise NotImplementedError

    def on_update(self, mon: EpisodeMonitor) -> None:
        """Task physics beyond MuJoCo's (e.g. a latch that breaks), run at the monitor rate."""

    def extra_details(self, mon: EpisodeMonitor) -> dict[str, float]:
        return {}


def _scale(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi))


def _log_scale(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _shift(xy, rng: np.random.Generator, d: float) -> list[float]:
    return [_f(c + rng.uniform(-d, d)) for c in xy]


def _side_and_mirror(rng: np.random.Generator) -> tuple[str, float]:
    """The working arm and the y sign of its half of the table (left arm: +y)."""
    side = ("left", "right")[int(rng.integers(2))]
    return side, (1.0 if side == "left" else -1.0)


class PickPlace(Task):
    name = "pick_place"
    text = "pick up the red cube and place it in the bin"
    time_limit_s = 8.0
    object_body = "cube"
    BIN_INNER_HALF, BIN_WALL, BIN_HEIGHT = 0.065, 0.008, 0.055

    def sample(self, rng):
        side, s = _side_and_mirror(rng)
        cube_y = s * rng.uniform(0.23, 0.30)
        return {"side": side, "cube_half": _f(rng.uniform(0.02, 0.024)), "cube_mass": _f(rng.uniform(0.08, 0.3)),
                "cube_friction": _f(rng.uniform(0.6, 1.1)),
                "cube_pos": [_f(rng.uniform(0.31, 0.37)), _f(cube_y)], "cube_yaw": _f(rng.uniform(-0.785, 0.785)),
                "bin_pos": [_f(rng.uniform(0.32, 0.37)), _f(cube_y - s * rng.uniform(0.17, 0.19))]}

    def vary(self, p, rng):
        # 1.6-3.0 cm cubes (the gripper opens 8 cm), 2 cm slop in where the cube stands
        return {**p, "cube_half": _f(min(0.03, p["cube_half"] * _scale(rng, 0.8, 1.25))),
                "cube_mass": _f(p["cube_mass"] * _log_scale(rng, 0.5, 2.0)),
                "cube_friction": _f(p["cube_friction"] * _scale(rng, 0.6, 1.3)),
                "cube_pos": _shift(p["cube_pos"], rng, 0.02), "cube_yaw": _f(p["cube_yaw"] + rng.uniform(-0.3, 0.3))}

    def goal_point(self, mon):
        bx, by = mon.spec.params["bin_pos"]
        return np.array([bx, by, ts.TABLE_TOP_Z + mon.spec.params["cube_half"]])

    def xml(self, p):
        h = p["cube_half"]
        bx, by = p["bin_pos"]
        a, w, hh = self.BIN_INNER_HALF, self.BIN_WALL / 2, self.BIN_HEIGHT / 2
        z0 = ts.TABLE_TOP_Z
        walls = "".join(
            f'<geom name="obstacle_bin_{i}" type="box" size="{sx} {sy} {hh}" pos="{bx + dx} {by + dy} {z0 + hh}" '
            f'rgba="0.2 0.35 0.6 1" group="{ts.GROUP_TASK}"/>'
            for i, (dx, dy, sx, sy) in enumerate(((a + w, 0, w, a + 2 * w), (-a - w, 0, w, a + 2 * w),
                                                  (0, a + w, a, w), (0, -a - w, a, w))))
        return ts.TaskXml(worldbody=f"""
    {walls}
    <body name="cube" pos="{p['cube_pos'][0]} {p['cube_pos'][1]} {z0 + h}" quat="{_quat_z(p['cube_yaw'])}">
      <freejoint/>
      <geom type="box" size="{h} {h} {h}" mass="{p['cube_mass']}" friction="{p['cube_friction']} 0.005 0.0001"
            rgba="0.85 0.1 0.1 1" group="{ts.GROUP_TASK}"/>
    </body>""")

    def grip_width(self, p):
        return 2 * p["cube_half"]

    def half_extents(self, p):
        return (p["cube_half"],) * 3

    def _in_bin(self, mon):
        bx, by = mon.spec.params["bin_pos"]
        x, y, z = mon.obj_pos
        lim = self.BIN_INNER_HALF - 0.01
        return abs(x - bx) < lim and abs(y - by) < lim and z < ts.TABLE_TOP_Z + self.BIN_HEIGHT

    def goal_reached(self, mon):
        return self._in_bin(mon) and not mon.robot_touching_object and mon.obj_speed < 0.05

    def failure_label(self, mon):
        if mon.grasp_s >= GRASP_MIN_S:
            return "slip_drop"
        if mon.tilt_deg > 30 or mon.displacement > 0.03:
            return "knocked_over"
        return "missed_grasp" if mon.gripper_closed else "timeout"

    def extra_details(self, mon):
        return {"in_bin": float(self._in_bin(mon))}


class Push(Task):
    name = "push"
    text = "push the blue block into the green target area"
    time_limit_s = 7.0
    object_body = "block"
    TARGET_RADIUS = 0.04
    BLOCK_HALF_HEIGHT = 0.06   # tall and narrow: stable under a low push, tips under a high one

    def sample(self, rng):
        side, s = _side_and_mirror(rng)
        start_y = s * rng.uniform(0.24, 0.28)
        return {"side": side, "block_half": _f(rng.uniform(0.022, 0.026)), "block_mass": _f(rng.uniform(0.15, 0.35)),
                "block_friction": _f(rng.uniform(0.3, 0.4)),
                "block_pos": [_f(rng.uniform(0.30, 0.35)), _f(start_y)], "block_yaw": _f(rng.uniform(-0.15, 0.15)),
                "push_distance": _f(rng.uniform(0.13, 0.17))}

    def vary(self, p, rng):
        return {**p, "block_half": _f(p["block_half"] * _scale(rng, 0.8, 1.25)),
                "block_mass": _f(p["block_mass"] * _log_scale(rng, 0.5, 2.0)),
                "block_friction": _f(p["block_friction"] * _scale(rng, 0.6, 1.5)),
                "block_pos": _shift(p["block_pos"], rng, 0.02), "block_yaw": _f(p["block_yaw"] + rng.uniform(-0.1, 0.1)),
                "push_distance": _f(p["push_distance"] * _scale(rng, 0.85, 1.15))}

    def goal_point(self, mon):
        return np.array([*self.target(mon.spec.params), ts.TABLE_TOP_Z + self.BLOCK_HALF_HEIGHT])

    def target(self, p):
        s = 1.0 if p["side"] == "left" else -1.0
        return np.array([p["block_pos"][0], p["block_pos"][1] - s * p["push_distance"]])

    def xml(self, p):
        h, hz = p["block_half"], self.BLOCK_HALF_HEIGHT
        tx, ty = self.target(p)
        bx, by = p["block_pos"]
        return ts.TaskXml(worldbody=f"""
    <geom name="target_area" type="cylinder" size="{self.TARGET_RADIUS} 0.0005"
          pos="{tx} {ty} {ts.TABLE_TOP_Z + 0.0005}" rgba="0.1 0.75 0.2 1" contype="0" conaffinity="0"
          group="{ts.GROUP_TASK}"/>
    <body name="block" pos="{bx} {by} {ts.TABLE_TOP_Z + hz}" quat="{_quat_z(p['block_yaw'])}">
      <freejoint/>
      <geom type="box" size="{h} {h} {hz}" mass="{p['block_mass']}" friction="{p['block_friction']} 0.005 0.0001"
            rgba="0.15 0.3 0.85 1" group="{ts.GROUP_TASK}"/>
    </body>""")

    def grip_width(self, p):
        return 2 * p["block_half"]

    def half_extents(self, p):
        return p["block_half"], p["block_half"], self.BLOCK_HALF_HEIGHT

    def _distance(self, mon):
        return float(np.linalg.norm(mon.obj_pos[:2] - self.target(mon.spec.params)))

    def goal_reached(self, mon):
        return (self._distance(mon) < self.TARGET_RADIUS and mon.tilt_deg < 15
                and not mon.robot_touching_object and mon.obj_speed < 0.02)

    def failure_label(self, mon):
        if mon.tilt_deg > 45:
            return "knocked_over"
        return "missed_target" if mon.robot_touched_object else "missed_contact"

    def extra_details(self, mon):
        return {"distance_to_target_m": _f(self._distance(mon))}


class Unplug(Task):
    """The plug's insert sits in a pocket of the socket housing: the pocket walls and floor carry
    sideways and downward loads; a weld (the contacts' retention) holds it until the upward pull on
    the plug exceeds its extraction force, then breaks and the plug is a free body."""
    name = "unplug"
    text = "pull the black plug out of the socket"
    time_limit_s = 6.0
    object_body = "plug"
    HOUSING_HALF = (0.045, 0.035, 0.015)
    PLUG_HALF = (0.015, 0.0125, 0.025)       # the part above the housing, gripped across y
    INSERT_HALF = (0.009, 0.007, 0.006)      # the part inside the pocket
    POCKET_CLEARANCE = 0.0005
    UNPLUGGED_RISE = 0.03

    def sample(self, rng):
        side, s = _side_and_mirror(rng)
        return {"side": side, "socket_pos": [_f(rng.uniform(0.32, 0.37)), _f(s * rng.uniform(0.18, 0.28))],
                "socket_yaw": _f(rng.uniform(-0.3, 0.3)), "plug_mass": _f(rng.uniform(0.05, 0.12)),
                "plug_friction": _f(rng.uniform(0.7, 1.1)), "extraction_force": _f(rng.uniform(8.0, 14.0))}

    def vary(self, p, rng):   # the plug's size is fixed: the socket's pocket is built around it
        return {**p, "socket_pos": _shift(p["socket_pos"], rng, 0.02),
                "socket_yaw": _f(p["socket_yaw"] + rng.uniform(-0.15, 0.15)),
                "plug_mass": _f(p["plug_mass"] * _log_scale(rng, 0.5, 2.0)),
                "plug_friction": _f(p["plug_friction"] * _scale(rng, 0.6, 1.3)),
                "extraction_force": _f(p["extraction_force"] * _scale(rng, 0.6, 1.5))}

    def goal_point(self, mon):
        return mon.obj_start + np.array([0.0, 0.0, self.UNPLUGGED_RISE])

    def plug_top_z(self):
        return ts.TABLE_TOP_Z + 2 * self.HOUSING_HALF[2] + 0.001 + 2 * self.PLUG_HALF[2]

    def xml(self, p):
        hx, hy, hz = self.HOUSING_HALF
        px, py, pz = self.PLUG_HALF
        ix, iy, iz = self.INSERT_HALF
        c = self.POCKET_CLEARANCE
        x, y = p["socket_pos"]
        yaw = p["socket_yaw"]
        top = ts.TABLE_TOP_Z + 2 * hz
        floor_hz = hz - iz                  # housing below the pocket
        ax, ay = ix + c, iy + c             # pocket half sizes
        # Housing = floor block + four walls around the pocket, in the socket frame.
        parts = [((0, 0, floor_hz - hz), (hx, hy, floor_hz)),
                 ((ax + (hx - ax) / 2, 0, hz - iz), ((hx - ax) / 2, hy, iz)),
                 ((-ax - (hx - ax) / 2, 0, hz - iz), ((hx - ax) / 2, hy, iz)),
                 ((0, ay + (hy - ay) / 2, hz - iz), (ax, (hy - ay) / 2, iz)),
                 ((0, -ay - (hy - ay) / 2, hz - iz), (ax, (hy - ay) / 2, iz))]
        housing = "".join(
            f'<geom name="obstacle_socket_{i}" type="box" size="{ts.mjcf_vec(half)}" pos="{ts.mjcf_vec(pos)}" '
            f'rgba="0.92 0.92 0.9 1" group="{ts.GROUP_TASK}"/>' for i, (pos, half) in enumerate(parts))
        return ts.TaskXml(worldbody=f"""
    <body name="socket" pos="{x} {y} {ts.TABLE_TOP_Z + hz}" quat="{_quat_z(yaw)}">
      {housing}
    </body>
    <body name="plug" pos="{x} {y} {top + 0.001 + pz}" quat="{_quat_z(yaw)}">
      <freejoint/>
      <geom type="box" size="{px} {py} {pz}" mass="{p['plug_mass']}" friction="{p['plug_friction']} 0.005 0.0001"
            rgba="0.08 0.08 0.08 1" group="{ts.GROUP_TASK}"/>
      <geom type="box" size="{ix} {iy} {iz}" pos="0 0 {-pz - 0.001 - iz}" mass="0.005" rgba="0.8 0.7 0.3 1"
            group="{ts.GROUP_TASK}"/>
    </body>""", equality='<weld name="plug_latch" body1="plug"/>')

    def grip_width(self, p):
        return 2 * self.PLUG_HALF[1]

    def half_extents(self, p):
        return self.PLUG_HALF

    def on_update(self, mon):
        if mon.unplugged:
            return
        d = mon.data
        eq = mon.latch_id
        rows = np.flatnonzero((d.efc_type[:d.nefc] == mujoco.mjtConstraint.mjCNSTR_EQUALITY)
                              & (d.efc_id[:d.nefc] == eq))
        # Rows 0..2 of a weld are its force on body1 (the plug) in world axes; it holds the plug down.
        pull = -float(d.efc_force[rows[2]]) if len(rows) else 0.0
        mon.peak_pull = max(mon.peak_pull, pull)
        if pull > mon.spec.params["extraction_force"]:
            d.eq_active[eq] = 0
            mon.unplugged = True

    def _rise(self, mon):
        return float(mon.obj_pos[2] - mon.obj_start[2])

    def goal_reached(self, mon):
        return mon.unplugged and self._rise(mon) >= self.UNPLUGGED_RISE

    def failure_label(self, mon):
        if mon.grasp_s >= GRASP_MIN_S:
            return "slip_drop"
        return "missed_grasp" if mon.gripper_closed else "timeout"

    def extra_details(self, mon):
        return {"unplugged": float(mon.unplugged), "peak_pull_n": _f(mon.peak_pull), "rise_m": _f(self._rise(mon))}


TASKS: dict[str, Task] = {t.name: t for t in (PickPlace(), Push(), Unplug())}


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task '{name}'; known tasks: {', '.join(TASKS)}") from None


def make_episode(task: str, seed: int) -> EpisodeSpec:
    """The randomised episode for (task, seed): the same pair always gives the same scene (seeds from
    SCENE_VARIATION_BASE: a perturbed copy of the scene of seed % SCENE_VARIATION_BASE)."""
    t = get_task(task)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    base = int(seed) % SCENE_VARIATION_BASE
    rng = np.random.default_rng([base, sorted(TASKS).index(task)])
    params = t.sample(rng)
    scene = ts.SceneParams.sample(rng)
    if seed >= SCENE_VARIATION_BASE:
        params = t.vary(params, np.random.default_rng([int(seed), sorted(TASKS).index(task), 0x5CE4E]))
    return EpisodeSpec(task=task, seed=int(seed), task_text=t.text, side=params["side"],
                       time_limit_s=t.time_limit_s, randomisation={"scene": asdict(scene), "task": params})


def build_model(contract, spec: EpisodeSpec, *, camera_width: int = 320, camera_height: int = 200,
                physics_dt: float = 0.002) -> mujoco.MjModel:
    """Compile the episode's scene (twin and controllers build it the same way)."""
    xml = ts.build_mjcf(contract, spec.scene, get_task(spec.task).xml(spec.params), camera_width=camera_width,
                        camera_height=camera_height, physics_dt=physics_dt)
    return mujoco.MjModel.from_xml_string(xml)


class EpisodeMonitor:
    """Tracks the ground truth of one episode at ``MONITOR_HZ`` and turns it into a TaskOutcome.

    Contact forces are read from the constraint solver (elliptic cones: the first row of a contact
    is its normal force), so they are the forces the physics actually applied."""

    def __init__(self, spec: EpisodeSpec, model: mujoco.MjModel, data: mujoco.MjData):
        self.spec, self.model, self.data = spec, model, data
        self.task = get_task(spec.task)
        m = model
        geom_body = m.geom_bodyid
        base = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, ts.BASE_BODY)
        obj = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, self.task.object_body)
        names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, i) or "" for i in range(m.ngeom)]
        self.is_robot = m.body_rootid[geom_body] == base
        self.is_object = geom_body == obj
        self.is_static = np.array([n == "table" or n.startswith("obstacle_") for n in names])
        self.pads = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, n) for n in ts.pad_geoms(spec.side)])
        self.is_pad = np.isin(np.arange(m.ngeom), self.pads)
        self.obj_body = obj
        self.tendon = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_TENDON, ts.gripper_tendon(spec.side))
        self.latch_id = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_EQUALITY, "plug_latch")
        self.grip_width = self.task.grip_width(spec.params)
        self.obj_start = data.xpos[obj].copy()
        self.obj_pos = self.obj_start.copy()
        self.obj_speed = 0.0
        self.tilt_deg = self.displacement = self.max_lift = 0.0
        self.grasp_s = 0.0
        self.max_static_force = self.max_press_force = 0.0
        self.recent_static_force = self.recent_press_force = 0.0   # peaks since the last scene_state()
        self.robot_touching_object = self.robot_touched_object = False
        self.gripper_closed = False
        self.unplugged = False
        self.peak_pull = 0.0
        self.final: TaskOutcome | None = None

    def update(self, dt: float) -> None:
        """Sample the state once; ``dt`` is the time since the previous sample."""
        if self.final is not None:
            return
        d = self.data
        self.task.on_update(self)
        self.obj_pos = d.xpos[self.obj_body].copy()
        self.obj_speed = float(np.linalg.norm(d.cvel[self.obj_body][3:]))  # its centre of mass (a free body)
        self.tilt_deg = math.degrees(math.acos(float(np.clip(d.xmat[self.obj_body][8], -1.0, 1.0))))
        self.displacement = float(np.linalg.norm(self.obj_pos[:2] - self.obj_start[:2]))
        self.max_lift = max(self.max_lift, float(self.obj_pos[2] - self.obj_start[2]))
        if d.ten_length[self.tendon] < self.grip_width - 0.005:
            self.gripper_closed = True

        n = d.ncon
        g = d.contact.geom[:n]
        adr = d.contact.efc_address[:n]
        fn = np.where(adr >= 0, d.efc_force[np.maximum(adr, 0)], 0.0) if n else np.zeros(0)
        g0, g1 = g[:, 0], g[:, 1]
        robot_static = (self.is_robot[g0] & self.is_static[g1]) | (self.is_robot[g1] & self.is_static[g0])
        robot_obj = (self.is_robot[g0] & self.is_object[g1]) | (self.is_robot[g1] & self.is_object[g0])
        pad_obj = robot_obj & (self.is_pad[g0] | self.is_pad[g1])
        press = robot_obj & ~pad_obj
        static_force, press_force = float(fn[robot_static].sum()), float(fn[press].sum())
        self.max_static_force = max(self.max_static_force, static_force)
        self.max_press_force = max(self.max_press_force, press_force)
        self.recent_static_force = max(self.recent_static_force, static_force)
        self.recent_press_force = max(self.recent_press_force, press_force)
        self.robot_touching_object = bool(robot_obj.any())
        self.robot_touched_object |= self.robot_touching_object
        if self._both_pads_on_object(g):
            self.grasp_s += dt

        t = d.time
        if self.collided:
            self.final = self._outcome(False, "collision")
        elif self.task.goal_reached(self):
            self.final = self._outcome(True, "success")
        elif self.obj_pos[2] < ts.TABLE_TOP_Z - 0.1 or t >= self.spec.time_limit_s - 1e-9:
            self.final = self._outcome(False, self.task.failure_label(self))

    def _both_pads_on_object(self, g: np.ndarray) -> bool:
        """Both finger pads touch the object (the checker's grasp) in the contacts' geom pairs ``g``."""
        on_obj = self.is_object[g[:, 0]] | self.is_object[g[:, 1]]
        return len({int(x) for x in g[on_obj].ravel() if self.is_pad[x]}) == 2

    def scene_state(self) -> np.ndarray:
        """The scene now, as the columns of episodes.data.SCENE_STATE_NAMES: the object's pose (world
        frame), held (both pads on it now), table_contact (the checker's collision verdict so far:
        robot on table/bin/housing or pressing the object; frozen once the outcome is decided), goal,
        the object's half extents, and the largest robot-on-static and robot-pressing-object normal
        forces (what the collision verdict compares) sampled since the previous call, which resets them."""
        d = self.data
        held = self._both_pads_on_object(d.contact.geom[:d.ncon])
        forces = [self.recent_static_force, self.recent_press_force]
        self.recent_static_force = self.recent_press_force = 0.0
        return np.concatenate([d.xpos[self.obj_body], d.xquat[self.obj_body], [float(held), float(self.collided)],
                               self.task.goal_point(self), self.task.half_extents(self.spec.params),
                               forces]).astype(np.float32)

    @property
    def collided(self) -> bool:
        return self.max_static_force > COLLISION_FORCE_N or self.max_press_force > PRESS_FORCE_N

    @property
    def done(self) -> bool:
        return self.final is not None

    def outcome(self) -> TaskOutcome:
        return self.final or self._outcome(False, "in_progress")

    def _outcome(self, success: bool, label: str) -> TaskOutcome:
        details = {"time_s": _f(self.data.time), "grasp_s": _f(self.grasp_s),
                   "max_static_force_n": _f(self.max_static_force), "max_press_force_n": _f(self.max_press_force),
                   "object_displacement_m": _f(self.displacement), "object_tilt_deg": _f(self.tilt_deg),
                   "object_max_lift_m": _f(self.max_lift), **self.task.extra_details(self)}
        return TaskOutcome(success=success, label=label, details=details)

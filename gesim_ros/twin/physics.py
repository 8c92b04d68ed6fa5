"""G2Twin: the MuJoCo twin of the AgiBot G2 upper body, as a plain Python object (no ROS).

It stands in for the robot in lab tests and shadow mode, and produces labelled interaction data:
``reset(task, seed)`` builds the randomised episode, ``set_joint_targets`` + ``step`` drive it the
way the robot's joint_control topic does, the sensor methods return what the robot's topics carry
(contract joint order, metres, rgb8), and ``outcome()`` is the physics' verdict (twin_tasks).

The ROS node wraps this class; it owns rates and timestamps. Everything here is deterministic for a
given task, seed and command sequence (MuJoCo is; rendering does not touch the physics).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gesim_ros.twin import scene as ts
from gesim_ros.twin import tasks as tt
from gesim_ros.contract.contract import Contract, load_contract
from gesim_ros.twin.scene import mujoco

LIDAR_ELEVATION_DEG = (-7.0, 52.0)   # Livox-like vertical field of view
LIDAR_AZIMUTH_DEG = (-90.0, 90.0)    # the front half: the chassis blocks the rear
LIDAR_RANGE_M = 20.0


class TwinCommandError(ValueError):
    """A joint command the twin refused; it was not applied (the message says which input and why)."""


class G2Twin:
    """MuJoCo twin of the G2 upper body. Call ``reset(task, seed)`` before anything else."""

    def __init__(self, contract: Contract | None = None, camera_width: int = 320, camera_height: int = 200,
                 lidar_rays: tuple[int, int] = (16, 180), physics_dt: float = 0.002):
        """``lidar_rays`` is (elevations, azimuths); ``physics_dt`` the MuJoCo time step (s)."""
        for name, v in (("camera_width", camera_width), ("camera_height", camera_height)):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= 4096:
                raise ValueError(f"{name} must be an integer in 1..4096 pixels, got {v!r}")
        if (not isinstance(lidar_rays, (tuple, list)) or len(lidar_rays) != 2
                or not all(isinstance(n, int) and n > 0 for n in lidar_rays)):
            raise ValueError(f"lidar_rays must be (elevations, azimuths) positive integers, got {lidar_rays!r}")
        if not (isinstance(physics_dt, (int, float)) and 0 < physics_dt <= 0.01):
            raise ValueError(f"physics_dt must be in (0, 0.01] s, got {physics_dt!r}")
        self.contract = contract or load_contract()
        self.camera_width, self.camera_height, self.physics_dt = camera_width, camera_height, float(physics_dt)
        self.joint_names: tuple[str, ...] = self.contract.joint_names
        self._index = {n: i for i, n in enumerate(self.joint_names)}
        self._lo = np.array([self.contract.joint_limits[n][0] for n in self.joint_names])
        self._hi = np.array([self.contract.joint_limits[n][1] for n in self.joint_names])
        el = np.radians(np.linspace(*LIDAR_ELEVATION_DEG, lidar_rays[0]))
        az = np.radians(np.linspace(*LIDAR_AZIMUTH_DEG, lidar_rays[1]))
        el, az = np.meshgrid(el, az, indexing="ij")
        self._lidar_dirs = np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)], -1).reshape(-1, 3)
        self._lidar_groups = np.array([g != ts.GROUP_ROBOT for g in range(6)], dtype=np.uint8)
        self.model: mujoco.MjModel | None = None
        self.data: mujoco.MjData | None = None
        self._renderer: _Offscreen | None = None
        self._spec: tt.EpisodeSpec | None = None

    # -- episode ----------------------------------------------------------------------------------
    def reset(self, task: str, seed: int) -> tt.EpisodeSpec:
        """Build the randomised scene for (task, seed) and put the robot in its home pose."""
        return self.reset_to(tt.make_episode(task, seed))

    def reset_to(self, spec: tt.EpisodeSpec) -> tt.EpisodeSpec:
        """Build the scene ``spec`` describes (``reset``'s, or one with some parameters changed, e.g. an
        object's mass) and put the robot in its home pose."""
        self.close()
        m = tt.build_model(self.contract, spec, camera_width=self.camera_width,
                           camera_height=self.camera_height, physics_dt=self.physics_dt)
        d = mujoco.MjData(m)
        c = self.contract
        grippers = {c.joint_groups["left_gripper"][0]: "left", c.joint_groups["right_gripper"][0]: "right"}
        self._is_hinge = np.array([n not in grippers for n in self.joint_names])
        hinge = [n for n in self.joint_names if n not in grippers]
        self._qadr = np.array([m.joint(n).qposadr[0] for n in hinge])
        self._dadr = np.array([m.joint(n).dofadr[0] for n in hinge])
        self._tendons = np.array([m.tendon(ts.gripper_tendon(grippers[n])).id for n in grippers])
        self._grip_act = np.array([m.actuator(n).id for n in grippers])
        self._act = np.array([m.actuator(n).id for n in self.joint_names])
        home = ts.home_pose(c)
        d.qpos[self._qadr] = [home[n] for n in hinge]
        for n, side in grippers.items():
            for j in ts.finger_joints(side):
                d.qpos[m.joint(j).qposadr[0]] = home[n] / 2
        d.ctrl[self._act] = [home[n] for n in self.joint_names]
        mujoco.mj_forward(m, d)

        self.model, self.data, self._spec = m, d, spec
        self._monitor = tt.EpisodeMonitor(spec, m, d)
        self._monitor_every = max(1, int(round(1.0 / (tt.MONITOR_HZ * self.physics_dt))))
        self._steps = 0
        self._t_target = 0.0
        self._tactile = {arm: ts.TactilePads(m, arm) for arm in ts.ARMS}
        self._sensor = {n: slice(m.sensor(n).adr[0], m.sensor(n).adr[0] + m.sensor(n).dim[0])
                        for n in ("imu_accel", "imu_gyro", "imu_quat")}
        self._lidar_site = m.site(ts.LIDAR_SITE).id
        return spec

    @property
    def spec(self) -> tt.EpisodeSpec:
        self._require_episode()
        return self._spec

    @property
    def time(self) -> float:
        self._require_episode()
        return float(self.data.time)

    @property
    def done(self) -> bool:
        """The task finished (success, or a failure that ends it) or its time limit passed."""
        self._require_episode()
        return self._monitor.done

    def outcome(self) -> tt.TaskOutcome:
        """The checker's verdict so far ('in_progress' until the episode is done)."""
        self._require_episode()
        return self._monitor.outcome()

    def scene_state(self) -> np.ndarray:
        """The task objects' state as the checker sees it (pose, held, collided; SCENE_STATE_NAMES)."""
        self._require_episode()
        return self._monitor.scene_state()

    def close(self) -> None:
        """Release the renderer's GL context (reset() calls this for the previous episode)."""
        if self._renderer is not None:
            self._renderer.free()
            self._renderer = None

    # -- commands ---------------------------------------------------------------------------------
    def set_joint_targets(self, names: Sequence[str], positions: Sequence[float]) -> None:
        """Set position targets for the named contract joints (grippers: opening in metres).
        Validates everything before applying anything: a refused command changes nothing."""
        self._require_episode()
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise TwinCommandError(f"names must be a list of joint names, got {type(names).__name__}")
        try:
            pos = np.asarray(positions, dtype=float)
        except (TypeError, ValueError):
            raise TwinCommandError(f"positions must be numbers, got {positions!r}") from None
        if len(names) == 0:
            raise TwinCommandError(f"no joint names given; name the joints to command (any of "
                                   f"{', '.join(self.joint_names)})")
        if pos.ndim != 1 or len(pos) != len(names):
            raise TwinCommandError(f"{len(names)} joint names but positions of shape {pos.shape}; "
                                   "give exactly one position per name")
        unknown = [n for n in names if n not in self._index]
        if unknown:
            raise TwinCommandError(f"unknown joint names {unknown}; the contract's joints are "
                                   f"{', '.join(self.joint_names)}")
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if list(names).count(n) > 1})
            raise TwinCommandError(f"joint names listed twice: {dup}; name each joint once")
        bad = [n for n, v in zip(names, pos) if not math.isfinite(v)]
        if bad:
            raise TwinCommandError(f"non-finite target (NaN/inf) for {bad}; send finite positions")
        idx = np.array([self._index[n] for n in names])
        out = (pos < self._lo[idx]) | (pos > self._hi[idx])
        if out.any():
            why = "; ".join(f"{names[i]}={pos[i]:.4g} outside [{self._lo[idx[i]]:.4g}, {self._hi[idx[i]]:.4g}]"
                            for i in np.flatnonzero(out))
            raise TwinCommandError(f"target out of the contract's joint limits: {why}; clamp to the limits")
        self.data.ctrl[self._act[idx]] = pos

    def step(self, duration_s: float) -> None:
        """Advance the physics by ``duration_s``. Steps are whole physics steps; the remainder is
        carried over, so repeated calls at a control period keep time without drift."""
        self._require_episode()
        if not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s) and duration_s >= 0):
            raise ValueError(f"duration_s must be a finite number >= 0, got {duration_s!r}")
        self._t_target += float(duration_s)
        n = int(round((self._t_target - self.data.time) / self.physics_dt))
        every = self._monitor_every
        while n > 0:
            k = min(n, every - self._steps % every)
            mujoco.mj_step(self.model, self.data, nstep=k)
            self._steps += k
            n -= k
            if self._steps % every == 0:
                self._monitor.update(every * self.physics_dt)

    # -- sensors ----------------------------------------------------------------------------------
    def joint_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions, velocities, efforts) in contract joint order. Efforts are the actuator
        torques including gravity compensation (N m); grippers: opening (m), its rate (m/s) and the
        servo force along the opening (N; negative while squeezing)."""
        self._require_episode()
        d, hinge = self.data, self._is_hinge
        pos, vel, eff = np.empty(len(hinge)), np.empty(len(hinge)), np.empty(len(hinge))
        pos[hinge], vel[hinge], eff[hinge] = d.qpos[self._qadr], d.qvel[self._dadr], d.qfrc_actuator[self._dadr]
        pos[~hinge], vel[~hinge] = d.ten_length[self._tendons], d.ten_velocity[self._tendons]
        eff[~hinge] = d.actuator_force[self._grip_act]
        return pos, vel, eff

    def render_cameras(self) -> dict[str, np.ndarray]:
        """{contract camera key: uint8 (H, W, 3) rgb} for the head and both wrist cameras. The head
        is rendered last, so a following render_head_depth() reads its depth without rendering."""
        self._require_episode()
        cams = sorted((t for t in self.contract.cameras if t.view is not None), key=lambda t: t.view == "head")
        return {t.key: self._offscreen().rgb(self.data, ts.CAMERA_FOR_VIEW[t.view], self._steps) for t in cams}

    def render_head_depth(self) -> np.ndarray:
        """float32 (H, W) z-depth in metres from the head camera (the same pose as head_color)."""
        self._require_episode()
        return self._offscreen().depth(self.data, ts.CAMERA_FOR_VIEW["head"], self._steps)

    def _offscreen(self) -> _Offscreen:
        if self._renderer is None:      # created on first use: physics-only runs need no GL
            self._renderer = _Offscreen(self.model, self.camera_width, self.camera_height)
        return self._renderer

    def imu(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(orientation quaternion x, y, z, w; angular velocity rad/s; linear acceleration m/s^2),
        in the IMU frame; at rest the accelerometer reads +9.81 up (specific force)."""
        self._require_episode()
        s = self.data.sensordata
        w, x, y, z = s[self._sensor["imu_quat"]]
        return (np.array([x, y, z, w]), s[self._sensor["imu_gyro"]].copy(), s[self._sensor["imu_accel"]].copy())

    def lidar(self) -> np.ndarray:
        """float32 (N, 3) hit points in the lidar frame, by ray casting against the scene (not the
        robot itself); rays that hit nothing within range are dropped."""
        self._require_episode()
        m, d = self.model, self.data
        rot = d.site_xmat[self._lidar_site].reshape(3, 3)
        n = len(self._lidar_dirs)
        dist = np.empty(n)
        geom = np.empty(n, dtype=np.int32)
        mujoco.mj_multiRay(m, d, d.site_xpos[self._lidar_site].copy(), (self._lidar_dirs @ rot.T).ravel(),
                           self._lidar_groups, 1, -1, geom, dist, None, n, LIDAR_RANGE_M)
        hit = geom >= 0
        return (self._lidar_dirs[hit] * dist[hit, None]).astype(np.float32)

    def tactile(self) -> dict[str, ts.TaxelGrid]:
        """{'left', 'right'}: each gripper's taxel grid (twin_scene.TaxelGrid, forces in mN)."""
        self._require_episode()
        return {s: pads.read(self.model, self.data) for s, pads in self._tactile.items()}

    def __enter__(self) -> G2Twin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _require_episode(self) -> None:
        if self.data is None:
            raise RuntimeError("the twin has no episode yet: call reset(task, seed) first")


class _Offscreen:
    """Offscreen rendering of the twin's cameras in one GL context.

    Shadows, reflections and multisampling are off (each costs several times the render on software
    GL). A frame stays in the framebuffer until the next render, so colour and depth of the same
    camera at the same physics step come from a single render pass."""

    def __init__(self, model: mujoco.MjModel, width: int, height: int):
        self.model = model
        try:
            self._gl = mujoco.GLContext(width, height)
            self._gl.make_current()
            self._ctx = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_100)
        except (mujoco.FatalError, RuntimeError) as exc:
            raise RuntimeError(
                f"MuJoCo could not create an OpenGL context ({exc}). Headless machines need EGL: set "
                "MUJOCO_GL=egl in the environment, or import gesim_ros.twin.physics before mujoco "
                "(MuJoCo picks its GL backend when it is first imported).") from None
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._ctx)
        self._ctx.readDepthMap = mujoco.mjtDepthMap.mjDEPTH_ZEROFAR   # reversed z: 1 at near, 0 at far
        self._scene = mujoco.MjvScene(model, maxgeom=500)
        self._scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        self._scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        self._option = mujoco.MjvOption()
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._rect = mujoco.MjrRect(0, 0, width, height)
        self._rgb = np.empty((height, width, 3), np.uint8)
        self._zbuf = np.empty((height, width), np.float32)
        self._near = model.vis.map.znear * model.stat.extent
        self._far = model.vis.map.zfar * model.stat.extent
        self._frame: tuple[int, str] | None = None   # (physics step, camera) in the framebuffer

    def _draw(self, data: mujoco.MjData, camera: str, step: int) -> None:
        self._gl.make_current()
        if self._frame != (step, camera):
            self._camera.fixedcamid = self.model.camera(camera).id
            mujoco.mjv_updateScene(self.model, data, self._option, None, self._camera,
                                   mujoco.mjtCatBit.mjCAT_ALL, self._scene)
            mujoco.mjr_render(self._rect, self._scene, self._ctx)
            self._frame = (step, camera)

    def rgb(self, data: mujoco.MjData, camera: str, step: int) -> np.ndarray:
        self._draw(data, camera, step)
        mujoco.mjr_readPixels(self._rgb, None, self._rect, self._ctx)
        return np.flipud(self._rgb).copy()   # OpenGL rows run bottom-up

    def depth(self, data: mujoco.MjData, camera: str, step: int) -> np.ndarray:
        self._draw(data, camera, step)
        mujoco.mjr_readPixels(None, self._zbuf, self._rect, self._ctx)
        n, f = self._near, self._far
        z = np.flipud(self._zbuf).astype(np.float64)
        return (n * f / (n + z * (f - n))).astype(np.float32)

    def free(self) -> None:
        self._ctx.free()
        self._gl.free()

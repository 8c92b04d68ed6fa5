"""MJCF for the MuJoCo twin of the AgiBot G2 upper body, and the read-out of its tactile pads.

The scene is generated from parameters (not a static file) because every episode recompiles it with
its own domain randomisation: object poses, friction and mass come from the task (twin_tasks), lights
and camera-pose jitter from ``SceneParams``. Joint names and limits come from the G2 contract, so the
twin, the ROS node and the policy agree on them by construction. No ROS imports.

Frames: world z up, x forward from the robot; ``base_link`` (the chassis) is the world origin and is
fixed (the wheeled base does not drive in lab tests). Geom groups: 0 environment, 1 robot, 2 task
objects; the lidar ignores group 1 (a self-filter, as a real driver's box filter would). Robot geoms
collide with the environment and objects but not with each other (contype 2 / conaffinity 1).

What is approximate versus the real G2 (a lab must not read more into the twin than this):

- Kinematics are G2-like, not AgiBot's URDF: link lengths (upper arm 0.28 m, forearm 0.26 m, wrist
  centre to grasp point 0.125 m, so ~0.66 m reach), shoulder height (1.16 m over a 0.70 m table),
  joint axis directions and the zero pose (arms hanging, joints stacked as shoulder
  pitch-roll-yaw, elbow pitch, wrist yaw-pitch-roll) are chosen to resemble a human-like 7-DoF
  arm. The left arm mirrors the right (roll and yaw axes flipped), so equal joint values give
  mirror-image poses. Positions in joint space therefore transfer to the real robot only
  qualitatively.
- No self-collision: arm-arm and arm-torso contacts are not simulated (the joint stacks overlap by
  construction); the scripted controllers keep the arms apart, a policy is not stopped by the twin.
- The 5-DoF waist is modelled as pitch, pitch, pitch, roll, yaw at assumed heights; the head as
  yaw, roll, pitch. Both are held at the home pose unless commanded.
- Masses and inertias are rough (primitive shapes with assumed densities); motor dynamics are ideal
  PD position servos (``position`` actuators with kv, torque limits) with gravity compensation done
  through the actuators, so reported efforts include the gravity load, as a real joint's would.
- The gripper is an ideal parallel gripper: two slide fingers coupled by an equality constraint and
  driven by one position servo on their summed opening (the contract's gripper value), so the grip
  force is kp * (commanded - actual opening), capped at 40 N. The real G2 gripper's linkage and
  force control are not modelled.
- Tactile pads: MuJoCo reports a few contact points per touching patch (the corners of the overlap
  for box-box contacts); each patch's force is spread evenly over the taxels its points span, so
  totals and patch extent are physical but the pressure gradient inside a patch is not; there is
  no sensor noise, hysteresis or dead taxel.
- Cameras are ideal pinholes with the contract's calibrated intrinsics (no distortion, no exposure,
  no noise), rendered at any size as the contract's image resized; depth is exact z-depth. The IMU
  sits on the fixed chassis, so it reads gravity and zero rate (no noise or bias). The lidar is a
  fixed ray pattern (Livox-like field of view), not Livox's non-repetitive scan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")
import mujoco  # noqa: E402  (MUJOCO_GL must be set before the import)

from gesim_ros.contract.contract import Contract  # noqa: E402

ARMS = ("left", "right")
GROUP_ENV, GROUP_ROBOT, GROUP_TASK = 0, 1, 2

# Geometry the controllers and checkers share (metres).
TABLE_TOP_Z = 0.70
TABLE_X = (0.20, 0.80)
TABLE_Y = (-0.55, 0.55)
SHOULDER_Y = 0.22
WRIST_TO_GRASP = 0.125          # wrist-pitch centre to the grasp point between the pad centres
FINGER_TIP_BELOW_GRASP = 0.025  # fingertip distance below the grasp point along the approach axis
FINGER_HALF_WIDTH = 0.01        # half width of a finger across its pad (hand x axis)
FINGER_THICKNESS = 0.012        # finger plus pad thickness along the opening axis
GRIPPER_MAX_OPENING = 0.08
GRIPPER_KP = 800.0              # N per metre of opening error: grip force = kp * (cmd - opening)
GRIPPER_FORCE_LIMIT = 40.0

# Tactile pad: a 4x4 taxel grid on each finger's inner face. Pad frame: z is the pad's outward
# normal (towards the other finger), x runs along the finger towards the tip, y across it.
PAD_LENGTH, PAD_WIDTH, PAD_THICKNESS = 0.035, 0.02, 0.002
PAD_ROWS, PAD_COLS = 4, 4
# MuJoCo combines friction by taking the larger coefficient, so objects with friction above this
# (all task objects) set the pad-object friction themselves, and their randomisation matters.
PAD_FRICTION = 0.5

CAMERA_FOR_VIEW = {"head": "head_camera", "left_wrist": "wrist_left_camera",
                   "right_wrist": "wrist_right_camera"}
IMU_SITE, LIDAR_SITE = "imu_chassis_link", "livox_front_link"
BASE_BODY = "base_link"         # the fixed chassis; every robot body descends from it


def grasp_site(side: str) -> str:
    return f"grasp_{side}"


def pad_geoms(side: str) -> tuple[str, str]:
    """The two pad geoms of one gripper: finger 'a' (hand +y side) then finger 'b'."""
    return f"pad_{side}_a", f"pad_{side}_b"


def gripper_tendon(side: str) -> str:
    return f"gripper_{side}_opening"


def finger_joints(side: str) -> tuple[str, str]:
    return f"finger_{side}_a", f"finger_{side}_b"


# Arm joint axes (right arm, left arm) in the zero pose, arm hanging down. The left arm mirrors the
# right across the x-z plane: pitch (y) axes stay, roll (x) and yaw (z) axes flip sign.
_ARM_JOINTS = (
    ((0, 1, 0), (0, 1, 0)),    # 1 shoulder pitch (negative swings the arm forward)
    ((1, 0, 0), (-1, 0, 0)),   # 2 shoulder roll
    ((0, 0, 1), (0, 0, -1)),   # 3 upper-arm yaw
    ((0, 1, 0), (0, 1, 0)),    # 4 elbow pitch (negative flexes forward)
    ((0, 0, 1), (0, 0, -1)),   # 5 forearm yaw
    ((0, 1, 0), (0, 1, 0)),    # 6 wrist pitch
    ((0, 0, 1), (0, 0, -1)),   # 7 wrist roll
)
UPPER_ARM, FOREARM = 0.28, 0.26
# Servo gains per arm joint (shoulder..wrist): a held 0.3 kg cube sags < 1 mm (measured),
# damped near critically for the link inertias above.
_ARM_KP = (1500, 1500, 800, 800, 150, 150, 100)
_ARM_KV = (60, 60, 30, 25, 4, 4, 2.5)
_ARM_FORCE = (90, 90, 45, 45, 15, 15, 15)
_ARM_ARMATURE = (0.1, 0.1, 0.05, 0.05, 0.01, 0.01, 0.01)


def home_pose(contract: Contract) -> dict[str, float]:
    """Joint values the twin starts in and holds unless commanded: upright waist, head tilted to see
    the table, each gripper open and pointing down 20 cm above the table near its side, elbows out.
    The elbow-out branch matters: with the wrist pitch limited to +-1.6 rad, top-down grasps over
    the table exist only with the elbow raised sideways, so the controllers' IK stays near this pose."""
    arm = (-0.76, -1.04, 1.16, -1.98, -1.09, 1.45, -0.89)
    pose = {n: 0.0 for n in contract.joint_names}
    pose[contract.joint_groups["head"][2]] = 0.5
    for group in ("left_arm", "right_arm"):
        pose.update(zip(contract.joint_groups[group], arm))
    for group in ("left_gripper", "right_gripper"):
        pose[contract.joint_groups[group][0]] = GRIPPER_MAX_OPENING
    return pose


@dataclass(frozen=True)
class SceneParams:
    """Scene-level domain randomisation (task-independent): lighting and camera-pose jitter."""
    light_dir: tuple[float, float, float] = (0.3, 0.2, -1.0)
    light_diffuse: float = 0.7
    ambient: float = 0.3
    table_rgb: tuple[float, float, float] = (0.55, 0.42, 0.3)
    head_camera_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)   # metres
    head_camera_tilt: float = 0.0   # rad, added to the built-in downward tilt
    head_camera_pan: float = 0.0    # rad
    wrist_camera_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @staticmethod
    def sample(rng: np.random.Generator) -> SceneParams:
        u = rng.uniform
        return SceneParams(
            light_dir=(float(u(-0.5, 0.5)), float(u(-0.5, 0.5)), -1.0),
            light_diffuse=float(u(0.45, 0.9)), ambient=float(u(0.15, 0.4)),
            table_rgb=tuple(float(c) for c in np.clip(np.array([0.55, 0.42, 0.3]) + u(-0.1, 0.1, 3), 0, 1)),
            head_camera_offset=tuple(float(x) for x in u(-0.01, 0.01, 3)),
            head_camera_tilt=float(u(-0.035, 0.035)), head_camera_pan=float(u(-0.035, 0.035)),
            wrist_camera_offset=tuple(float(x) for x in u(-0.004, 0.004, 3)))


@dataclass(frozen=True)
class TaskXml:
    """A task's contribution to the MJCF: bodies/geoms under worldbody and equality constraints."""
    worldbody: str
    equality: str = ""


def mjcf_vec(x) -> str:
    """Numbers as an MJCF attribute value ('0.1 0 0.5')."""
    return " ".join(f"{float(c):.6g}" for c in x)


def _camera_xyaxes(tilt: float, pan: float) -> str:
    """xyaxes of a camera looking along +x of its body, tilted down by ``tilt`` and panned left by
    ``pan`` (MuJoCo cameras look along their -z with y up)."""
    fwd = np.array([np.cos(tilt) * np.cos(pan), np.cos(tilt) * np.sin(pan), -np.sin(tilt)])
    right = np.array([np.sin(pan), -np.cos(pan), 0.0])
    up = np.cross(right, fwd)
    return mjcf_vec(np.concatenate([right, up]))


def _camera_lens(contract: Contract, view: str, fovy_deg: float) -> str:
    """A camera's MJCF lens: the contract's calibrated intrinsics for ``view`` where it has them, so an
    image rendered at any size is that camera's image resized (non-square pixels included, as the
    contract's intrinsics scaled per axis describe it); else the twin's ideal ``fovy_deg`` camera."""
    try:
        topic = contract.camera_for_view(view)
    except KeyError:
        topic = None
    cal = topic.calibration if topic is not None else None
    if cal is None:
        return f'fovy="{fovy_deg}"'
    w, h = topic.width, topic.height
    # MuJoCo's principal point is an offset from the image centre; the sensor size (10 um pixels)
    # only fixes the units of the focal length.
    return (f'resolution="{w} {h}" focalpixel="{cal.fx} {cal.fy}" principalpixel="{w / 2 - cal.cx} '
            f'{h / 2 - cal.cy}" sensorsize="{w * 1e-5:.6g} {h * 1e-5:.6g}"')


def _arm_xml(contract: Contract, side: str, scene: SceneParams) -> str:
    joints = contract.joint_groups[f"{side}_arm"]
    sgn = 1.0 if side == "left" else -1.0
    axis = [a[1] if side == "left" else a[0] for a in _ARM_JOINTS]

    def joint(i: int) -> str:
        n = joints[i]
        lo, hi = contract.joint_limits[n]
        return (f'<joint name="{n}" axis="{mjcf_vec(axis[i])}" range="{lo} {hi}" '
                f'armature="{_ARM_ARMATURE[i]}" damping="0.5"/>')

    a, b = pad_geoms(side)
    fa, fb = finger_joints(side)
    cam = CAMERA_FOR_VIEW[f"{side}_wrist"]
    wo = np.array(scene.wrist_camera_offset)
    # Finger: a box behind its pad; the pad's geom frame has z = inward normal, x = towards the tip.
    pad_half = f"{PAD_LENGTH / 2} {PAD_WIDTH / 2} {PAD_THICKNESS / 2}"
    finger_body_half = f"{FINGER_HALF_WIDTH} {(FINGER_THICKNESS - PAD_THICKNESS) / 2} 0.03"
    fz = -(WRIST_TO_GRASP + FINGER_TIP_BELOW_GRASP) + 0.03  # finger box centre (tip at its bottom)
    fy = PAD_THICKNESS + (FINGER_THICKNESS - PAD_THICKNESS) / 2

    def finger(name: str, jname: str, pad: str, s: float) -> str:
        pad_y_axis = f"{s} 0 0"  # z = x cross y must point to the other finger (-s along hand y)
        return f"""
          <body gravcomp="1" name="{name}" childclass="finger">
            <joint name="{jname}" type="slide" axis="0 {s} 0" range="0 {GRIPPER_MAX_OPENING / 2}"/>
            <geom type="box" size="{finger_body_half}" pos="0 {s * fy} {fz}" rgba="0.2 0.2 0.22 1"/>
            <geom name="{pad}" type="box" size="{pad_half}" pos="0 {s * PAD_THICKNESS / 2} {-WRIST_TO_GRASP}"
                  xyaxes="0 0 -1 {pad_y_axis}" rgba="0.9 0.55 0.1 1" friction="{PAD_FRICTION} 0.01 0.001"
                  condim="4"/>
          </body>"""

    return f"""
    <body gravcomp="1" name="arm_{side}_link1" pos="0 {sgn * SHOULDER_Y} 0.26">
      {joint(0)}
      <geom type="sphere" size="0.05" mass="1.0"/>
      <body gravcomp="1" name="arm_{side}_link2">
        {joint(1)}
        <inertial pos="0 0 0" mass="0.2" diaginertia="2e-4 2e-4 2e-4"/>
        <body gravcomp="1" name="arm_{side}_link3">
          {joint(2)}
          <geom type="capsule" fromto="0 0 -0.03 0 0 {-UPPER_ARM + 0.02}" size="0.04" mass="1.6"/>
          <body gravcomp="1" name="arm_{side}_link4" pos="0 0 {-UPPER_ARM}">
            {joint(3)}
            <geom type="sphere" size="0.042" mass="0.4"/>
            <body gravcomp="1" name="arm_{side}_link5">
              {joint(4)}
              <geom type="capsule" fromto="0 0 -0.03 0 0 {-FOREARM + 0.03}" size="0.035" mass="1.1"/>
              <body gravcomp="1" name="arm_{side}_link6" pos="0 0 {-FOREARM}">
                {joint(5)}
                <geom type="sphere" size="0.035" mass="0.3"/>
                <body gravcomp="1" name="arm_{side}_link7">
                  {joint(6)}
                  <geom type="box" size="0.02 0.055 0.028" pos="0 0 -0.062" mass="0.5" rgba="0.25 0.25 0.28 1"/>
                  <site name="{grasp_site(side)}" pos="0 0 {-WRIST_TO_GRASP}" size="0.005" group="3"/>
                  <camera name="{cam}" pos="{mjcf_vec(np.array([0.065, 0.0, -0.045]) + wo)}"
                          xyaxes="0 -1 0 0.966 0 -0.257" {_camera_lens(contract, f"{side}_wrist", 80.0)}/>
                  {finger(f"finger_{side}_a_link", fa, a, 1.0)}
                  {finger(f"finger_{side}_b_link", fb, b, -1.0)}
                </body>
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>"""


def build_mjcf(contract: Contract, scene: SceneParams, task: TaskXml, *, camera_width: int = 320,
               camera_height: int = 200, physics_dt: float = 0.002) -> str:
    """The full MJCF: environment, robot (contract joint names and limits), task objects."""
    g = contract.joint_groups
    lim = contract.joint_limits

    def hinge(name: str, axis: str) -> str:
        return f'<joint name="{name}" axis="{axis}" range="{lim[name][0]} {lim[name][1]}" damping="5"/>'

    ho = np.array(scene.head_camera_offset)
    head_cam_tilt = 0.55 + scene.head_camera_tilt  # built-in tilt; the home head pitch adds 0.5 rad
    waist_hinges = ("0 1 0", "0 1 0", "0 1 0", "1 0 0", "0 0 1")
    head_hinges = ("0 0 1", "1 0 0", "0 1 0")
    tx0, tx1 = TABLE_X
    ty0, ty1 = TABLE_Y
    tcx, tcy, thx, thy = (tx0 + tx1) / 2, (ty0 + ty1) / 2, (tx1 - tx0) / 2, (ty1 - ty0) / 2
    legs = "".join(
        f'<geom type="box" size="0.025 0.025 {(TABLE_TOP_Z - 0.03) / 2}" '
        f'pos="{x} {y} {(TABLE_TOP_Z - 0.03) / 2}" material="table"/>'
        for x in (tx0 + 0.05, tx1 - 0.05) for y in (ty0 + 0.05, ty1 - 0.05))
    walls = "".join(
        f'<geom type="box" size="{sx} {sy} 1.2" pos="{x} {y} 1.2" rgba="0.78 0.8 0.82 1"/>'
        for x, y, sx, sy in ((2.6, 0, 0.05, 2.6), (-1.6, 0, 0.05, 2.6), (0.5, 2.6, 2.1, 0.05),
                             (0.5, -2.6, 2.1, 0.05)))

    actuators = []
    for group, kp, kv, frc in (("waist", 8000, 800, 800), ("head", 60, 6, 20)):
        actuators += [f'<position name="{n}" joint="{n}" kp="{kp}" kv="{kv}" forcerange="{-frc} {frc}" '
                      f'ctrlrange="{lim[n][0]} {lim[n][1]}"/>' for n in g[group]]
    for arm in ARMS:
        actuators += [f'<position name="{n}" joint="{n}" kp="{kp}" kv="{kv}" forcerange="{-f} {f}" '
                      f'ctrlrange="{lim[n][0]} {lim[n][1]}"/>'
                      for n, kp, kv, f in zip(g[f"{arm}_arm"], _ARM_KP, _ARM_KV, _ARM_FORCE)]
    for arm in ARMS:
        n = g[f"{arm}_gripper"][0]
        actuators.append(
            f'<position name="{n}" tendon="{gripper_tendon(arm)}" kp="{GRIPPER_KP}" kv="20" '
            f'forcerange="{-GRIPPER_FORCE_LIMIT} {GRIPPER_FORCE_LIMIT}" ctrlrange="{lim[n][0]} {lim[n][1]}"/>')
    tendons = "".join(
        f'<fixed name="{gripper_tendon(s)}"><joint joint="{finger_joints(s)[0]}" coef="1"/>'
        f'<joint joint="{finger_joints(s)[1]}" coef="1"/></fixed>' for s in ARMS)
    couplings = "".join(
        f'<joint joint1="{finger_joints(s)[1]}" joint2="{finger_joints(s)[0]}" polycoef="0 1 0 0 0" '
        f'solref="0.005 1"/>' for s in ARMS)

    return f"""<mujoco model="g2_twin">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{physics_dt}" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <statistic extent="2" center="0.4 0 0.8"/>
  <visual>
    <global offwidth="{max(camera_width, 640)}" offheight="{max(camera_height, 480)}"/>
    <map znear="0.005" zfar="4"/>
    <quality shadowsize="0" offsamples="0"/>
    <headlight ambient="{scene.ambient} {scene.ambient} {scene.ambient}" diffuse="0.25 0.25 0.25" specular="0 0 0"/>
  </visual>
  <default>
    <geom group="{GROUP_ENV}" friction="0.3 0.005 0.0001" contype="1" conaffinity="3"/>
    <default class="robot">
      <geom group="{GROUP_ROBOT}" rgba="0.82 0.83 0.86 1" density="600" contype="2" conaffinity="1"/>
      <joint actuatorgravcomp="true"/>
      <default class="finger">
        <joint armature="0.02" damping="2"/>
        <geom mass="0.05"/>
      </default>
    </default>
  </default>
  <asset>
    <texture name="grid" type="2d" builtin="checker" rgb1="0.35 0.37 0.4" rgb2="0.3 0.32 0.35"
             width="256" height="256"/>
    <material name="floor" texture="grid" texrepeat="8 8"/>
    <material name="table" rgba="{mjcf_vec(scene.table_rgb)} 1"/>
  </asset>
  <worldbody>
    <light name="key" directional="true" dir="{mjcf_vec(scene.light_dir)}" pos="0 0 3" castshadow="false"
           diffuse="{scene.light_diffuse} {scene.light_diffuse} {scene.light_diffuse}" specular="0.1 0.1 0.1"/>
    <geom name="floor" type="plane" size="3 3 0.05" material="floor"/>
    {walls}
    <geom name="table" type="box" size="{thx} {thy} 0.015" pos="{tcx} {tcy} {TABLE_TOP_Z - 0.015}" material="table"/>
    {legs}
    <body name="{BASE_BODY}" childclass="robot">
      <geom type="box" size="0.22 0.25 0.16" pos="-0.05 0 0.17" rgba="0.3 0.3 0.33 1"/>
      <site name="{IMU_SITE}" pos="0 0 0.2" size="0.01" group="3"/>
      <site name="{LIDAR_SITE}" pos="0.18 0 0.3" size="0.01" group="3"/>
      <body name="waist_link1" pos="0 0 0.34" gravcomp="1">
        {hinge(g["waist"][0], waist_hinges[0])}
        <geom type="capsule" fromto="0 0 0.02 0 0 0.24" size="0.07" mass="4"/>
        <body name="waist_link2" pos="0 0 0.26" gravcomp="1">
          {hinge(g["waist"][1], waist_hinges[1])}
          <geom type="capsule" fromto="0 0 0.02 0 0 0.22" size="0.07" mass="4"/>
          <body name="waist_link3" pos="0 0 0.24" gravcomp="1">
            {hinge(g["waist"][2], waist_hinges[2])}
            <geom type="sphere" size="0.08" mass="2"/>
            <body name="waist_link4" pos="0 0 0.04" gravcomp="1">
              {hinge(g["waist"][3], waist_hinges[3])}
              <geom type="cylinder" size="0.07 0.02" mass="1"/>
              <body name="torso_link" pos="0 0 0.02" gravcomp="1">
                {hinge(g["waist"][4], waist_hinges[4])}
                <geom type="box" size="0.1 0.16 0.17" pos="0 0 0.19" mass="10"/>
                <body name="head_link1" pos="0 0 0.38" gravcomp="1">
                  {hinge(g["head"][0], head_hinges[0])}
                  <geom type="capsule" fromto="0 0 0 0 0 0.05" size="0.03" mass="0.3"/>
                  <body name="head_link2" pos="0 0 0.06" gravcomp="1">
                    {hinge(g["head"][1], head_hinges[1])}
                    <inertial pos="0 0 0" mass="0.2" diaginertia="2e-4 2e-4 2e-4"/>
                    <body name="head_link3" gravcomp="1">
                      {hinge(g["head"][2], head_hinges[2])}
                      <geom type="box" size="0.08 0.1 0.08" pos="0.01 0 0.06" mass="1.5"/>
                      <camera name="{CAMERA_FOR_VIEW['head']}" pos="{mjcf_vec(np.array([0.095, 0.0, 0.06]) + ho)}"
                              xyaxes="{_camera_xyaxes(head_cam_tilt, scene.head_camera_pan)}"
                              {_camera_lens(contract, "head", 60.0)}/>
                    </body>
                  </body>
                </body>
                {_arm_xml(contract, "left", scene)}
                {_arm_xml(contract, "right", scene)}
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>
    {task.worldbody}
  </worldbody>
  <tendon>{tendons}</tendon>
  <equality>{couplings}{task.equality}</equality>
  <actuator>{"".join(actuators)}</actuator>
  <sensor>
    <accelerometer name="imu_accel" site="{IMU_SITE}"/>
    <gyro name="imu_gyro" site="{IMU_SITE}"/>
    <framequat name="imu_quat" objtype="site" objname="{IMU_SITE}"/>
  </sensor>
</mujoco>"""


@dataclass
class TaxelGrid:
    """One gripper's tactile image: both finger pads stacked, rows 0..3 finger 'a' (hand +y side),
    rows 4..7 finger 'b'; row-major, row index along the finger (last row at the tip), column
    across it. Forces in millinewtons in each pad's frame: normal presses into the pad (>= 0), shear
    is the tangential force the object exerts on the pad (x towards the fingertip)."""
    rows: int
    cols: int
    resolution_x_mm: float
    resolution_y_mm: float
    normal: np.ndarray = field(repr=False)
    shear_x: np.ndarray = field(repr=False)
    shear_y: np.ndarray = field(repr=False)
    contact: np.ndarray = field(repr=False)
    valid: np.ndarray = field(repr=False)


class TactilePads:
    """Turns MuJoCo contact forces on one gripper's two pad geoms into taxel forces.

    Each contact's force comes from ``mj_contactForce``. MuJoCo represents a touching patch by a
    few points (for a flat face on the pad, the corners of the overlap), so the total force and
    shear of each touching geom are spread evenly over the taxels that the rectangle spanned by its
    contact points covers: a face contact fills its patch, an edge a line, a corner one taxel. The
    sum over taxels equals the physics' contact force; the pressure gradient inside a patch is not
    resolved."""

    def __init__(self, model: mujoco.MjModel, side: str):
        self.pad_ids = np.array([mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, n) for n in pad_geoms(side)])
        self._force = np.zeros(6)

    def read(self, model: mujoco.MjModel, data: mujoco.MjData) -> TaxelGrid:
        n = PAD_ROWS * PAD_COLS
        grid = np.zeros((2, PAD_ROWS, PAD_COLS, 3))  # per pad: (normal, shear_x, shear_y) in newtons
        geoms = data.contact.geom[:data.ncon]
        patches: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]] = {}
        for ci in np.flatnonzero(np.isin(geoms, self.pad_ids).any(axis=1)):
            con = data.contact[ci]
            if con.efc_address < 0:  # excluded or beyond margin: exerts no force
                continue
            mujoco.mj_contactForce(model, data, ci, self._force)
            f_on_geom2 = con.frame.reshape(3, 3).T @ self._force[:3]  # frame rows: normal, tangents
            for k, pad in enumerate(self.pad_ids):
                if pad not in con.geom:
                    continue
                other = int(con.geom[0] if con.geom[1] == pad else con.geom[1])
                f_pad = f_on_geom2 if con.geom[1] == pad else -f_on_geom2
                rot = data.geom_xmat[pad].reshape(3, 3)          # columns: pad x, y, z in world
                fx, fy, fz = rot.T @ f_pad
                local_pos = rot.T @ (con.pos - data.geom_xpos[pad])
                patches.setdefault((k, other), []).append((local_pos, np.array([max(-fz, 0.0), fx, fy])))
        for (k, _), points in patches.items():
            pos = np.array([p for p, _ in points])
            cells = grid[k, _span(pos[:, 0], PAD_LENGTH, PAD_ROWS), _span(pos[:, 1], PAD_WIDTH, PAD_COLS)]
            cells += sum(f for _, f in points) / cells[..., 0].size
        f = (grid.reshape(2 * n, 3) * 1000.0).astype(np.float32)
        return TaxelGrid(rows=2 * PAD_ROWS, cols=PAD_COLS, resolution_x_mm=PAD_LENGTH * 1000 / PAD_ROWS,
                         resolution_y_mm=PAD_WIDTH * 1000 / PAD_COLS, normal=f[:, 0].copy(),
                         shear_x=f[:, 1].copy(), shear_y=f[:, 2].copy(), contact=f[:, 0] > 0.0,
                         valid=np.ones(2 * n, dtype=bool))


def _span(coords: np.ndarray, size: float, count: int) -> slice:
    """The taxels (``count`` across ``size``, centred on 0) that the interval of ``coords`` covers;
    points beyond the pad edge count for the edge taxel."""
    i = (np.clip(np.array([coords.min(), coords.max()]) / size + 0.5, 0.0, 1.0 - 1e-9) * count).astype(int)
    return slice(i[0], i[1] + 1)

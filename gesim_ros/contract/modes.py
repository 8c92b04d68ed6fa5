"""The backend modes and the sides that act in them: one set of names for the switch, the runner,
the world model, the comparator's store and the command line.

A *side* is one of the two backends: ``real`` (the physical robot, or the twin standing in for it)
and ``world_model``. A *mode* says which sides an episode runs on; ``none`` connects the policy to
neither.
"""

SIDES = ("real", "world_model")
#: the contract namespace each side publishes under
SIDE_NAMESPACE = {"real": "robot", "world_model": "world_model"}

#: mode -> the sides that act in it (shadow: the robot acts and the world model imagines alongside)
SIDES_BY_MODE = {"real": ("real",), "world_model": ("world_model",), "shadow": SIDES, "none": ()}

#: every mode SelectBackend and the switch's ``mode`` parameter take
MODES = tuple(SIDES_BY_MODE)
#: the modes an episode runs in (a side acts)
EPISODE_MODES = tuple(mode for mode, sides in SIDES_BY_MODE.items() if sides)
#: the modes in which the robot acts, and so its reset and its safety rules apply
ROBOT_MODES = tuple(mode for mode, sides in SIDES_BY_MODE.items() if "real" in sides)
#: the modes in which the world model imagines the episode
WORLD_MODEL_MODES = tuple(mode for mode, sides in SIDES_BY_MODE.items() if "world_model" in sides)


def unknown_mode(mode: str, allowed: tuple[str, ...] = MODES) -> str | None:
    """The refusal for a mode name outside ``allowed``, or None."""
    if mode in allowed:
        return None
    return f"unknown mode '{mode}'; use one of {', '.join(allowed)}"

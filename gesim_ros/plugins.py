"""The one plugin loader: policies, success checkers and world models are found by name among the
installed Python entry points of their group, and configured from one JSON object.

Each group's public API (``policy_api.load_policy``, ``world_model_api.load_world_model``, ...) builds
and checks its plugins from what :func:`load_entry_point` returns; discovery, the clear errors
(an unknown name lists the available ones) and config parsing are only here. Plain Python.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
from collections.abc import Iterable
from typing import Any

_LOG = logging.getLogger(__name__)


class UnknownPluginError(LookupError):
    """No plugin is registered under the requested name in an entry-point group."""


class PluginConfigError(ValueError):
    """A plugin's config parameter is not a JSON object; the message names the parameter and the fix."""


def available(group: str, entry_points: Iterable[importlib.metadata.EntryPoint] | None = None
              ) -> dict[str, importlib.metadata.EntryPoint]:
    """Plugin name -> entry point: the installed ones of ``group`` unless ``entry_points`` are given.
    The first of a name wins; a second one pointing elsewhere is logged, not silently dropped."""
    if entry_points is None:
        entry_points = importlib.metadata.entry_points(group=group)
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in entry_points:
        if ep.name in found and found[ep.name].value != ep.value:
            _LOG.warning("%s plugin %r registered twice (%s, %s); using the first",
                         group, ep.name, found[ep.name].value, ep.value)
        found.setdefault(ep.name, ep)
    return found


def load_entry_point(group: str, name: str, what: str,
                     entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
                     unknown: type[UnknownPluginError] = UnknownPluginError
                     ) -> tuple[importlib.metadata.EntryPoint, Any]:
    """The entry point registered as ``name`` in ``group`` and the object it names (a factory or a
    class). ``what`` ("policy", "world model", ...) names the kind in errors; an unknown name raises
    ``unknown`` listing the available ones, an import failure ImportError naming the target."""
    found = available(group, entry_points)
    if name not in found:
        hint = ", ".join(sorted(found)) or "none (is gesim_ros or the plugin package installed?)"
        raise unknown(f"unknown {what} {name!r}; available in entry-point group {group!r}: {hint}")
    ep = found[name]
    try:
        return ep, ep.load()
    except Exception as exc:  # any failure of the plugin's own imports
        raise ImportError(f"{what} {name!r} ({ep.value}) failed to import: {exc}") from exc


def plugin_config(parameter: str, text: str, example: str = '{"key": "value"}') -> dict[str, Any]:
    """A plugin's config from the JSON-object text of ``parameter`` (empty text: no settings, {}).
    Raises PluginConfigError naming the parameter, whether the text is not JSON or not an object,
    and the fix (``example`` shows a valid value)."""
    if not text.strip():
        return {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PluginConfigError(f"{parameter}: not valid JSON ({exc}): {text!r}. "
                                f"Fix: pass a JSON object, e.g. '{example}'") from None
    if not isinstance(config, dict):
        raise PluginConfigError(f"{parameter}: expected a JSON object, got {type(config).__name__} {text!r}. "
                                f"Fix: wrap the settings in {{...}}, e.g. '{example}'")
    return config

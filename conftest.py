"""Load the nncert pytest plugin when running from a source checkout (CI installs it too)."""

import importlib.metadata


def _plugin_installed() -> bool:
    return any(ep.value == "nncert.pytest_plugin"
               for ep in importlib.metadata.entry_points(group="pytest11"))


pytest_plugins = [] if _plugin_installed() else ["nncert.pytest_plugin"]

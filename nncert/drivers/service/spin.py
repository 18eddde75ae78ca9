"""Polling before sleeping, while it pays.

A call to the service, or a burst's message, is usually answered within a few hundred
microseconds, while waking a sleeping process costs tens to hundreds of them (more on an
idle virtual machine, whose cores doze). So a waiting side may poll for a short while
before it sleeps, as the HAL's burst does for its high-performance state (BURST-1), but
only when a core is idle: on a busy machine polling steals the core the other side needs.
"""

from __future__ import annotations

import os
import time

from nncert.drivers.base import readable

_load = {"checked": -1.0, "idle": False}


def idle_core(now: float) -> bool:
    """Whether the machine has a core to spare: no more runnable tasks than cores right now
    (this side and its peer may run; the fourth field of /proc/loadavg, read every 0.1 s)."""
    if now - _load["checked"] > 0.1:
        _load["checked"] = now
        try:
            with open("/proc/loadavg") as f:
                runnable = int(f.read().split()[3].partition("/")[0])
        except (OSError, ValueError, IndexError):
            runnable = 1 << 30
        _load["idle"] = runnable <= (os.cpu_count() or 1)
    return bool(_load["idle"])


def poll_readable(fd: int, seconds: float, latency: float = 0.0) -> float:
    """Poll ``fd`` for up to ``seconds`` (when a core is idle, and when ``latency``, how long
    messages have lately taken to come, is within that window), so that a reply arriving
    soon is read without sleeping; the caller then reads, blocking if nothing came. Returns
    when it started, for ``arrived``."""
    start = time.monotonic()
    if latency >= seconds or not idle_core(start):
        return start
    until = start + seconds
    while not readable([fd], 0) and time.monotonic() < until:
        os.sched_yield()
    return start


def arrived(latency: float, started: float) -> float:
    """The moving average of how long messages take to come, with one more that came now
    after waiting since ``started``: polling stops paying once they come later than its
    window (a test's next call after its checks, a reply after a preparation)."""
    return latency + 0.2 * (time.monotonic() - started - latency)

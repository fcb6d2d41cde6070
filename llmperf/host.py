"""The processor a measurement ran on, read without torch: its model name and its feature flags (Linux's
/proc/cpuinfo). `device` builds on it; the load generator, which never imports torch, uses it directly."""

from __future__ import annotations

import platform


def cpu_name() -> str:
    """The processor's model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    """The processor's feature flags as /proc/cpuinfo lists them (x86 "flags", Arm "Features"); empty where
    there is no /proc/cpuinfo, as on macOS."""
    try:
        with open("/proc/cpuinfo") as f:
            return {flag for line in f if line.startswith(("flags", "Features"))
                    for flag in line.split(":", 1)[1].split()}
    except OSError:
        return set()

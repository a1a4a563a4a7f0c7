"""Peak and current resident memory of this process for the benchmark scripts: VmHWM / VmRSS from /proc.

Not ru_maxrss: Linux carries a parent's high-water mark over fork and exec,
so a worker started by a large process (a pytest that imported torch, a
benchmark driver) would report the parent's size. Where /proc is missing
(macOS), ru_maxrss is the fallback (bytes there, KiB on Linux), and the peak
cannot be reset.
"""

from __future__ import annotations

import resource
import sys


def status_kib(field: str) -> int | None:
    """A /proc/self/status memory field ("VmRSS", "VmHWM") in KiB; None without /proc."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _maxrss_bytes() -> int:
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value if sys.platform == "darwin" else value * 1024


def rss_bytes() -> int:
    """Resident memory now (VmRSS; ru_maxrss without /proc)."""
    kib = status_kib("VmRSS")
    return kib * 1024 if kib is not None else _maxrss_bytes()


def peak_bytes() -> int:
    """Peak resident memory since exec or the last reset_peak (VmHWM; ru_maxrss without /proc)."""
    kib = status_kib("VmHWM")
    return kib * 1024 if kib is not None else _maxrss_bytes()


def reset_peak() -> str:
    """Resets the peak mark (VmHWM) to the current RSS (/proc/self/clear_refs); says how the peak is read."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return "VmHWM reset at the start of the timed region"
    except OSError:
        return "ru_maxrss since process start (could not reset VmHWM)"

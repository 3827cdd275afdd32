"""The memory a call takes, as the kernel counts it (Linux ``/proc/self/status``): for benches that print peaks."""

__all__ = ["status_bytes", "reset_peak"]


def status_bytes(field: str) -> int:
    """A ``/proc/self/status`` size field (``VmRSS``, ``VmHWM``, ...) in bytes.

    Examples:
        >>> status_bytes("VmRSS") > 0
        True
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> int:
    """Reset the process's peak RSS (``VmHWM``) to its current RSS; returns that RSS, the baseline of a peak's rise.

    Examples:
        >>> before = reset_peak(); data = bytearray(1 << 26); status_bytes("VmHWM") - before >= 1 << 26
        True
    """
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # VmHWM := VmRSS
    return status_bytes("VmRSS")

"""sd_notify for `Type=notify` with a watchdog: a datagram to $NOTIFY_SOCKET, nothing else."""

from __future__ import annotations

import os
import socket


def notify(message: str) -> bool:
    """Send READY=1, WATCHDOG=1, STOPPING=1 or STATUS=... to systemd; False when not under it."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
        return True
    except OSError:
        return False


def watchdog_interval() -> float | None:
    """Half the watchdog timeout systemd gave us (seconds), or None without a watchdog."""
    usec = os.environ.get("WATCHDOG_USEC")
    if not usec or not usec.isdigit():
        return None
    pid = os.environ.get("WATCHDOG_PID")
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    return int(usec) / 2_000_000

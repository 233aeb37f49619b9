"""Children and their parent: a parent-death signal, and a parent that adopts orphans.

mlcostd's simulated workloads, mlcost-top's embedded demo daemon and what the tests start must
not outlive their parent when it dies, even by SIGKILL (no handler runs then). The kernel sends
a chosen signal instead (prctl PR_SET_PDEATHSIG). It is sent when the *thread* that forked the
child exits, so start such children from a long-lived thread (the main one).

`mlcostd profile` follows a command's whole process tree, and a daemonized helper (a double
fork) leaves that tree at once. As a child subreaper (prctl PR_SET_CHILD_SUBREAPER) the profile
becomes the parent of every orphan among its descendants instead of init, so it still sees them.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, arg: int) -> bool:
    """prctl(option, arg); False where there is no prctl (not Linux) or it refused."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Orphans among this process's descendants are re-parented to it rather than to init
    (Linux 3.4+); it must then reap them (os.waitpid) or they stay zombies while it runs.
    False where the kernel has no such thing."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int) -> Callable[[], None]:
    """A Popen `preexec_fn`: the child gets `sig` when the calling process dies; where the
    parent is already gone by the time the child runs it, the child sends `sig` to itself."""
    parent = os.getpid()

    def preexec() -> None:  # in the child, between fork and exec
        if not _prctl(_PR_SET_PDEATHSIG, sig):
            return  # no prctl here: the parent's own cleanup is all there is
        if os.getppid() != parent:  # died before prctl ran: nothing would signal us
            os.kill(os.getpid(), sig)

    return preexec

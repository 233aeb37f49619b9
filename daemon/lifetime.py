"""Children that die with the process that started them: a parent-death signal.

mlcostd's simulated workloads, mlcost-top's embedded demo daemon and what the tests start must
not outlive their parent when it dies, even by SIGKILL (no handler runs then). The kernel sends
a chosen signal instead (prctl PR_SET_PDEATHSIG). It is sent when the *thread* that forked the
child exits, so start such children from a long-lived thread (the main one).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int) -> Callable[[], None]:
    """A Popen `preexec_fn`: the child gets `sig` when the calling process dies; where the
    parent is already gone by the time the child runs it, the child sends `sig` to itself."""
    parent = os.getpid()

    def preexec() -> None:  # in the child, between fork and exec
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        except (OSError, AttributeError):
            return  # no prctl here: the parent's own cleanup is all there is
        if os.getppid() != parent:  # died before prctl ran: nothing would signal us
            os.kill(os.getpid(), sig)

    return preexec

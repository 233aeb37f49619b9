"""Ctrl-C or SIGTERM while `mlcostd` starts: one line and exit 128+N, never a traceback.

Starting is Python loading mlcostd's modules and reading its options: some tenths of a second
in which nothing has been run or written yet. Python's default turns SIGINT into a
KeyboardInterrupt, whose traceback goes through whichever import it landed in, and leaves
SIGTERM to end the process without a word. Within `while_starting` SIGTERM raises `Stopped`
(as SIGINT raises KeyboardInterrupt), and either ends mlcostd with one line: "mlcostd: stopped
by SIGTERM while starting: nothing was run or written; exiting 143". A command that acts on
the signals later (the profile) keeps them (`KeptSignals`) before the block ends; every other
command gets SIGTERM's default back.

This module imports nothing of mlcostd's: it is loaded first, so that it covers the rest.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Stopped(BaseException):
    """SIGTERM while mlcostd started. A BaseException, as KeyboardInterrupt is: an `except
    Exception` on the way does not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stopped(signum: int, _frame: object) -> None:
    raise Stopped(signum)


@contextmanager
def while_starting(name: str = "mlcostd") -> Iterator[None]:
    """Within the block: SIGTERM raises Stopped, where it was left at its default (a
    parent's SIG_IGN, or a handler of a program that imports mlcostd, is kept) and in the
    main thread (the only one that may set handlers); KeyboardInterrupt or Stopped ends
    mlcostd with one line on stderr and SystemExit(128 + N). After it, SIGTERM is at its
    default again, unless the block gave it a handler of its own."""
    guarded = (threading.current_thread() is threading.main_thread()
               and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
    if guarded:
        signal.signal(signal.SIGTERM, _stopped)
    try:
        yield
    except (KeyboardInterrupt, Stopped) as exc:
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        status = 128 + signum
        print(f"{name}: stopped by {signal.Signals(signum).name} while starting: nothing was "
              f"run or written; exiting {status}", file=sys.stderr)
        raise SystemExit(status) from None
    finally:
        if guarded and signal.getsignal(signal.SIGTERM) is _stopped:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


class KeptSignals:
    """SIGINT and SIGTERM kept from now on, for a command that acts on them once it can (the
    profile hands them to its recorder): each is noted in `received`, in order. In the main
    thread only, as every signal handler."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: list[int] = []
        self._outside = {}
        if threading.current_thread() is not threading.main_thread():
            return  # (a caller in a thread: its signals are the main thread's to handle)
        for signum in self.SIGNALS:  # as outside while_starting, whose handler is the default
            handler = signal.getsignal(signum)
            self._outside[signum] = signal.SIG_DFL if handler is _stopped else handler
            signal.signal(signum, self._keep)

    def _keep(self, signum: int, _frame: object) -> None:
        self.received.append(signum)

    def restore(self) -> None:
        """The handlers as they were outside mlcostd's start (for a caller that goes on)."""
        for signum, handler in self._outside.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

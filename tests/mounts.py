"""Real mounts for the fault tests: a small tmpfs (a disk that fills), a read-only tmpfs, and a
read-only bind mount of a folder or file. Mounting needs root: the suite runs as root (.ci/run);
as another user these tests skip, saying so."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _mount(*args: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting needs root (the suite runs as root in .ci/run)")
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"mount {' '.join(args)} failed: {done.stderr.strip()}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


@contextlib.contextmanager
def tmpfs(folder: Path, size: str = "8m", read_only: bool = False) -> Iterator[Path]:
    """A fresh tmpfs of `size` on `folder` (created), read-only if asked; unmounted after."""
    folder.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}" + (",ro" if read_only else ""), "tmpfs",
           str(folder))
    try:
        yield folder
    finally:
        _umount(folder)


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """`path` (a folder or a file) bind-mounted read-only onto itself: root cannot write it
    either, as on a read-only file system. Unmounted after."""
    _mount("--bind", str(path), str(path))
    try:
        _mount("-o", "remount,bind,ro", str(path))
        yield path
    finally:
        _umount(path)


def fill(folder: Path) -> Path:
    """Write a file in `folder` until its disk is full; returns the file (delete it to free)."""
    filler = folder / "filler"
    with open(filler, "ab", buffering=0) as out:
        while True:
            try:
                out.write(b"\0" * 4096)
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
                break
    return filler


@contextlib.contextmanager
def bind(source: Path, target: Path) -> Iterator[Path]:
    """`source` also at `target` (created), writable; unmounted after."""
    target.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(source), str(target))
    try:
        yield target
    finally:
        _umount(target)

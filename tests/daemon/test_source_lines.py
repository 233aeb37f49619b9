"""A frame's source line, read by the root daemon only where the process's own user could read
it (daemon/analysis/source_lines.py), and redacted.

The files here are the test's own, in a folder under /tmp that every user may search
(`open_folder`: tmp_path's parents are root's, 0700, so no other user reaches into it). Each
permission case is also checked against the kernel itself: `as_nobody_can_read` runs `cat`
as nobody, so a verdict of the reader's that the kernel would not give fails here.
"""

from __future__ import annotations

import linecache
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from simhost import poll

from daemon.analysis import source_lines
from daemon.analysis.source_lines import (
    ANYONE,
    ROOT,
    Credentials,
    credentials,
    read_source_line,
    source_reader,
)
from daemon.sources.frames import Frame

NOBODY_UID = 65534
NOBODY = Credentials(NOBODY_UID, frozenset({65534}))
GROUP = 4242  # a group nobody is not in, unless a test says so
SECRET_LINE = 'DB_PASSWORD = "s3cr3t-hunter2"; cfg.get()\n'


def searchable_folder() -> Iterator[Path]:
    """A folder of the test's own that every user may search (0755, in /tmp), removed after."""
    folder = Path(tempfile.mkdtemp(prefix="mlcost-srcline-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


open_folder = pytest.fixture(searchable_folder, name="open_folder")


def write(path: Path, text: str, mode: int = 0o644, owner: tuple[int, int] = (0, 0)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    os.chown(path, *owner)
    return path


def folder(path: Path, mode: int, owner: tuple[int, int] = (0, 0)) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    os.chown(path, *owner)
    return path


def line(path: Path | str, reader: Credentials, number: int = 1, root: str = "/") -> str | None:
    return read_source_line(Frame("main", str(path), number), reader, root)


def as_nobody_can_read(path: Path, groups: tuple[int, ...] = ()) -> bool:
    """Whether the kernel lets nobody (with these extra groups) read `path`."""
    done = subprocess.run(["cat", str(path)], user=NOBODY_UID, group=65534,
                          extra_groups=list(groups), capture_output=True)
    return done.returncode == 0


def test_source_lines_are_read_without_keeping_every_file(open_folder):
    """The classifier reads a frame's line through /proc/PID/root: a new path per process.
    linecache kept each such file whole for good; the reader keeps a bounded set of lines, and
    a file changed on disk is read again."""
    paths = []
    for n in range(600):  # more files than the cache keeps
        path = open_folder / f"job_{n}.py"
        path.write_text("import time\n" + f"time.sleep({n})  # line 2\n" + "x = 1\n" * 500)
        path.chmod(0o644)
        paths.append(path)
    for n, path in enumerate(paths):
        assert line(path, ANYONE, 2) == f"time.sleep({n})  # line 2\n"
    assert not any(str(p) in linecache.cache for p in paths)
    assert source_lines.source_lines_kept() <= source_lines.SOURCE_LINES_KEPT
    paths[0].write_text("import time\nwhile True: pass\n")  # edited: a new size and mtime
    assert line(paths[0], ANYONE, 2) == "while True: pass\n"
    assert line(paths[0], ANYONE, 99) is None  # past its end
    assert line(open_folder, ANYONE) is None  # a folder
    assert line("<frozen importlib._bootstrap>", ANYONE) is None
    assert line("job_1.py", ROOT) is None  # relative: to a folder not known here


def test_a_frame_never_makes_root_read_a_file_its_process_could_not(open_folder):
    """mlcostd reads a frame's line as root, and the file name comes from the process: code
    that names a private file (here one 0600 of root's, standing for /etc/shadow) in a frame
    must not get its line back in the evidence. The process's own files and files anyone may
    read are still read; devices are never opened (opening one can act, as a watchdog does)."""
    private = write(open_folder / "shadow", "root:$6$secret-hash:19000::::::\n", 0o600)
    readable = write(open_folder / "train.py", "loss.backward()\n")
    own = write(open_folder / "own.py", "batch = next(it)\n", 0o600, (NOBODY_UID, 65534))
    link = open_folder / "innocent.py"
    link.symlink_to(private)

    assert line(private, NOBODY) is None
    assert line(link, NOBODY) is None
    assert line(private, ROOT) is not None  # root's own job
    assert line(readable, NOBODY) == "loss.backward()\n"
    assert line(own, NOBODY) == "batch = next(it)\n"
    assert line("/dev/null", ROOT) is None
    for path, expected in ((private, False), (link, False), (readable, True), (own, True)):
        assert as_nobody_can_read(path) is expected, path


def test_a_readable_file_in_a_folder_its_user_cannot_search_is_not_read(open_folder):
    """The probe's case: a 0644 file in a folder of root's, 0700. The file's own mode bits
    allow anyone to read it; the folder lets no one but root reach it."""
    priv = folder(open_folder / "priv", 0o700)
    secret = write(priv / "secret.txt", SECRET_LINE)
    assert line(secret, NOBODY) is None
    assert line(secret, ANYONE) is None
    assert not as_nobody_can_read(secret)
    priv.chmod(0o604)  # readable (a listing), not searchable: still not reached
    assert line(secret, NOBODY) is None
    assert not as_nobody_can_read(secret)
    priv.chmod(0o711)  # searchable, not readable: reached
    assert as_nobody_can_read(secret)
    assert line(secret, NOBODY) == 'DB_PASSWORD = <redacted>; cfg.get()\n'
    # a folder above it closed is as closed: every component is checked, not the last one
    open_folder.chmod(0o700)
    assert line(secret, NOBODY) is None
    assert not as_nobody_can_read(secret)


def test_a_file_without_read_permission_for_the_user_is_not_read(open_folder):
    theirs = write(open_folder / "theirs.py", "x = 1\n", 0o640, (0, GROUP))
    owner_cannot = write(open_folder / "mine.py", "y = 2\n", 0o044, (NOBODY_UID, 0))
    assert line(theirs, NOBODY) is None and not as_nobody_can_read(theirs)
    # its owner's bits decide for its owner, even where the others' bits would allow it
    assert line(owner_cannot, NOBODY) is None and not as_nobody_can_read(owner_cannot)


def test_group_membership_grants_what_the_group_bits_allow(open_folder):
    team = folder(open_folder / "team", 0o750, (0, GROUP))
    shared = write(team / "shared.py", "z = 3\n", 0o640, (0, GROUP))
    member = Credentials(NOBODY_UID, frozenset({65534, GROUP}))
    assert line(shared, member) == "z = 3\n"
    assert as_nobody_can_read(shared, groups=(GROUP,))
    assert line(shared, NOBODY) is None
    assert not as_nobody_can_read(shared)


def test_links_are_followed_as_the_user_would_and_never_out_of_the_process_root(open_folder):
    """A link is followed by the reader itself, each step checked as the user: to a file the
    user may read, the line; into a folder it may not search, nothing; a loop, nothing; `..`
    stops at the process's root, as chroot keeps it."""
    priv = folder(open_folder / "priv", 0o700)
    write(priv / "secret.py", SECRET_LINE)
    write(open_folder / "lib" / "model.py", "loss.backward()\n")
    (open_folder / "into_priv.py").symlink_to(priv / "secret.py")
    (open_folder / "relative.py").symlink_to("lib/../lib/model.py")
    (open_folder / "lib64").symlink_to("lib")
    (open_folder / "loop.py").symlink_to("loop.py")
    assert line(open_folder / "into_priv.py", NOBODY) is None
    assert line(open_folder / "relative.py", NOBODY) == "loss.backward()\n"
    assert line(open_folder / "lib64" / "model.py", NOBODY) == "loss.backward()\n"
    assert line(open_folder / "loop.py", ROOT) is None
    # inside a root of its own, `/..` is that root and an absolute link resolves inside it
    (open_folder / "lib" / "absolute.py").symlink_to("/lib/model.py")
    assert line("/../../lib/model.py", NOBODY, root=str(open_folder)) == "loss.backward()\n"
    assert line("/lib/absolute.py", NOBODY, root=str(open_folder)) == "loss.backward()\n"
    assert line("/../../etc/hostname", ROOT, root=str(open_folder)) is None


def test_another_users_link_in_a_sticky_shared_folder_is_not_followed(open_folder):
    """fs.protected_symlinks: in /tmp-like folders a link of someone else's may be a trap."""
    shared = folder(open_folder / "shared", 0o1777)
    target = write(open_folder / "model.py", "loss.backward()\n")
    trap = shared / "job.py"
    trap.symlink_to(target)
    os.lchown(trap, 1234, 1234)
    assert line(trap, NOBODY) is None
    os.lchown(trap, NOBODY_UID, 65534)  # its own link: followed
    assert line(trap, NOBODY) == "loss.backward()\n"


def test_fifos_devices_and_folders_are_never_opened(open_folder):
    """An O_PATH look first: a FIFO opened for reading would block the classifier until a
    writer came; a device opened can act."""
    fifo = open_folder / "train.py"
    os.mkfifo(fifo, 0o666)
    assert line(fifo, ROOT) is None  # returns at once: the test would hang otherwise
    assert line("/dev/zero", ROOT) is None
    assert line(open_folder, ROOT) is None


def acl(*entries: tuple[int, int, int]) -> bytes:
    """A system.posix_acl_access value: version 2, then (tag, perm, id) entries."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


ANY_ID = 0xFFFFFFFF
USER_OBJ, USER, GROUP_OBJ, ACL_GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20


def test_posix_acls_are_checked_as_the_kernel_checks_them(open_folder):
    """A 0644 file whose ACL names nobody with no permission: the others' bits would let
    nobody read it, the kernel does not; a 0600 one whose ACL grants a group read: a member
    reads it."""
    denied = write(open_folder / "denied.py", "a = 1\n")
    os.setxattr(denied, "system.posix_acl_access", acl(
        (USER_OBJ, 6, ANY_ID), (USER, 0, NOBODY_UID), (GROUP_OBJ, 4, ANY_ID), (MASK, 4, ANY_ID),
        (OTHER, 4, ANY_ID)))
    granted = write(open_folder / "granted.py", "b = 2\n", 0o600)
    os.setxattr(granted, "system.posix_acl_access", acl(
        (USER_OBJ, 6, ANY_ID), (GROUP_OBJ, 0, ANY_ID), (ACL_GROUP, 4, GROUP), (MASK, 4, ANY_ID),
        (OTHER, 0, ANY_ID)))
    member = Credentials(NOBODY_UID, frozenset({65534, GROUP}))
    assert line(denied, NOBODY) is None and not as_nobody_can_read(denied)
    assert line(denied, Credentials(1234, frozenset({1234}))) == "a = 1\n"
    assert line(granted, member) == "b = 2\n" and as_nobody_can_read(granted, (GROUP,))
    assert line(granted, NOBODY) is None and not as_nobody_can_read(granted)


def test_a_secret_on_a_readable_line_is_redacted(open_folder):
    path = write(open_folder / "settings.py", SECRET_LINE + "api_key: str = 'sk-abc'\n")
    assert line(path, NOBODY) == "DB_PASSWORD = <redacted>; cfg.get()\n"
    assert line(path, NOBODY, 2) == "api_key: str = <redacted>\n"


def test_credentials_are_the_processs_own(open_folder):
    """credentials(pid): the filesystem ids and groups from /proc/PID/status; root's
    capabilities count, an unprivileged process has none."""
    child = subprocess.Popen(["sleep", "60"], user=NOBODY_UID, group=65534,
                             extra_groups=[GROUP])
    try:
        found = credentials(child.pid)
        assert found == Credentials(NOBODY_UID, frozenset({65534, GROUP}), False)
    finally:
        child.kill()
        child.wait()
    assert credentials(os.getpid()) == Credentials(0, frozenset({0, *os.getgroups()}), True)
    assert credentials(child.pid) is None  # gone


def test_the_live_reader_reads_as_the_process_user(open_folder):
    """source_reader(pid) takes the process's user from /proc: a process of nobody's does not
    get a line of a root-only file, nor of a readable file in a root-only folder, while a
    file it may read still gives its line, through its own root."""
    private = write(open_folder / "secret.py", "TOKEN = 'do-not-show'\n", 0o600)
    hidden = write(folder(open_folder / "priv", 0o700) / "open.py", "print('no')\n")
    public = write(open_folder / "public.py", "print('hi')\n")
    child = subprocess.Popen(["sleep", "60"], user=NOBODY_UID)
    try:
        read = source_reader(child.pid, credentials(child.pid))
        assert read(Frame("main", str(private), 1)) is None
        assert read(Frame("main", str(hidden), 1)) is None
        assert read(Frame("main", str(public), 1)) == "print('hi')\n"
    finally:
        child.kill()
        child.wait()
    assert source_reader(child.pid, NOBODY)(Frame("main", str(public), 1)) is None  # gone


def test_rights_that_changed_since_the_dump_read_no_line(open_folder):
    """The frames are the image's the dump saw; a process that exec'd a set-user-ID program
    (passwd) since then has root's effective, saved and filesystem ids and all capabilities,
    and its user's frame naming /etc/shadow got a line of it (a probe as a local user, twice in
    two tries): its rights are read before the dump and must be the same after it, and a
    set-user-ID image's rights are its real user's."""
    public = write(open_folder / "public.py", "print('hi')\n")
    secret = write(open_folder / "secret.py", "TOKEN = 'root-only'\n", 0o600)
    child = subprocess.Popen(["sleep", "60"], user=NOBODY_UID, group=65534)
    try:
        before = credentials(child.pid)
        assert source_reader(child.pid, before)(Frame("main", str(public), 1)) == "print('hi')\n"
        # rights read before the dump that are not the rights now: no line at all
        assert source_reader(child.pid, ROOT)(Frame("main", str(secret), 1)) is None
        assert source_reader(child.pid, ROOT)(Frame("main", str(public), 1)) is None
    finally:
        child.kill()
        child.wait()


def test_a_set_user_id_image_reads_as_its_real_user(tmp_path):
    """A process whose effective, saved and filesystem ids are root's and whose real id is
    nobody's (what exec of a set-user-ID root program leaves) is read as nobody, without
    capabilities: python's os.setresuid makes that state without a set-user-ID file."""
    code = ("import os, sys, time\nos.setgroups([])\nos.setresgid(65534, 0, 0)\n"
            "os.setresuid(65534, 0, 0)\nprint('ready', flush=True)\ntime.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        found = credentials(child.pid)
        assert found == Credentials(NOBODY_UID, frozenset({65534}), reads_anything=False)
    finally:
        child.kill()
        child.wait()


def test_files_the_kernel_makes_are_never_read(open_folder):
    """/proc and /sys files are world-readable by their mode bits, but the kernel decides at
    open or read time what an opener gets: /proc/kallsyms gives addresses to root only (a
    user gets zeros: a probe got the kernel's real addresses through a frame naming it), and
    /proc/PID/maps of another user's process is refused to that user. Root opening them for
    the user would read what the user cannot."""
    own = subprocess.Popen(["sleep", "60"])  # root's: its maps are not nobody's to read
    try:
        for path, number in (("/proc/kallsyms", 1), (f"/proc/{own.pid}/maps", 1),
                             ("/proc/version", 1), ("/sys/kernel/mm/transparent_hugepage/enabled", 1)):
            if os.path.exists(path):
                assert line(path, NOBODY, number) is None, path
                assert line(path, ROOT, number) is None, path
        assert not as_nobody_can_read(Path(f"/proc/{own.pid}/maps"))
    finally:
        own.kill()
        own.wait()
    # a file of an ordinary file system still gives its line
    assert line(write(open_folder / "ok.py", "x = 1\n"), NOBODY) == "x = 1\n"


def test_a_file_whose_owner_holds_a_lease_is_not_waited_for(open_folder):
    """A user's process that holds a write lease (F_SETLEASE) on its own source file made the
    daemon's open wait for the kernel to break it (lease-break-time, 45 s), on its event loop,
    and again each time the user took the lease back (a probe stalled the daemon 22 of 29
    health polls): the open does not wait for a lease (O_NONBLOCK), so no line is read while
    one is held, and the line is read once it is given up."""
    source = write(open_folder / "leased.py", "print('mine')\n")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, signal, sys\n"
         "signal.signal(signal.SIGIO, signal.SIG_IGN)  # told of the break: it keeps it\n"
         "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
         "fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)\n"
         "print('leased', flush=True)\nsys.stdin.read()\n", str(source)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "leased\n"
        assert line(source, NOBODY) is None
    finally:
        holder.kill()
        holder.wait()
    assert line(source, NOBODY) == "print('mine')\n"


def held_read(folder: Path, monkeypatch: pytest.MonkeyPatch
              ) -> tuple[threading.Event, threading.Event, Path, str]:
    """A file that reads and one whose read hangs until the test sets `held` (no file system
    here can be made to hang a read, so the read itself is held): (held, entered: the hung
    read began, the readable file, the hanging file's path). READ_WAIT_S is 0.2 s."""
    held, entered = threading.Event(), threading.Event()
    real = source_lines.read_source_line
    public = write(folder / "public.py", "print('hi')\n")
    hanging = str(folder / "on-a-dead-mount.py")

    def read(frame, reader, root):
        if frame.filename == hanging:
            entered.set()
            held.wait()
        return real(frame, reader, root)

    monkeypatch.setattr(source_lines, "read_source_line", read)
    monkeypatch.setattr(source_lines, "READ_WAIT_S", 0.2)
    return held, entered, public, hanging


def test_a_read_that_hangs_holds_the_classifier_once_and_briefly(open_folder, monkeypatch):
    """The classifier runs on the daemon's event loop, and a file of the user's choice can hang
    a read (a hard NFS mount whose server is gone, a FUSE process that stops answering): a
    read is waited for at most READ_WAIT_S, and while it still hangs the next reads give no
    line at once, nothing queued behind it; once it ends, lines are read again. (No file
    system here can be made to hang a read, so the read itself is held by the test.)"""
    held, entered, public, hanging = held_read(open_folder, monkeypatch)
    reads = source_lines._LineReads()
    try:
        assert reads.read(Frame("main", hanging, 1), NOBODY, "/") is None
        assert entered.is_set() and reads.given_up == 1
        # while it hangs: no line, and not queued (the test's own thread count says so too)
        threads = threading.active_count()
        assert reads.read(Frame("main", str(public), 1), NOBODY, "/") is None
        assert reads.given_up == 2 and threading.active_count() == threads
    finally:
        held.set()
    poll(lambda: reads.read(Frame("main", str(public), 1), NOBODY, "/") == "print('hi')\n",
         10, "a line read once the hung read ended")


def test_a_hung_read_stops_the_lines_of_its_users_lane_only(open_folder, monkeypatch):
    """Probe 110: one user's read hung on their FUSE mount, and every user's stacks lost their
    lines while it hung (one thread read them all). Each user id reads in its lane (one of
    LANES): the hung user's next read gives none at once, another user's is read."""
    held, entered, public, hanging = held_read(open_folder, monkeypatch)
    reads = source_lines._LineReads()
    mallory = Credentials(1001, frozenset({1001}))
    other = Credentials(NOBODY_UID, frozenset({65534}))
    assert mallory.uid % source_lines.LANES != other.uid % source_lines.LANES
    try:
        assert reads.read(Frame("main", hanging, 1), mallory, "/") is None
        assert entered.is_set() and reads.given_up == 1
        assert reads.read(Frame("main", str(public), 1), mallory, "/") is None  # its lane
        assert reads.read(Frame("main", str(public), 1), other, "/") == "print('hi')\n"
        assert reads.given_up == 2
    finally:
        held.set()


def test_a_line_of_a_large_file_is_read_without_reading_the_file_whole(open_folder):
    """Probe 110: a 4 MiB frame file raised the daemon's peak memory by 44 MB (the file read
    whole and split for one line). Lines are read one by one now, a long one cut at
    LINE_LIMIT; \\r and \\r\\n end a line as they do for Python (a block at a time)."""
    import tracemalloc

    big = open_folder / "big.py"
    body = b"x = 1\n" * (source_lines.FILE_LIMIT // 6 - 10) + b"tail = 2\r\nlast = 3\rz"
    big.write_bytes(body)
    big.chmod(0o644)
    lines = body.splitlines(keepends=True)
    source_lines._SOURCE_LINES.clear()
    tracemalloc.start()
    try:
        got = line(big, NOBODY, len(lines) - 2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == "tail = 2\r\n"
    assert peak < len(body) // 2, peak  # it was over 9 x the file: 37 MB
    assert line(big, NOBODY, len(lines) - 1) == "last = 3\r"
    assert line(big, NOBODY, len(lines)) == "z"
    assert line(big, NOBODY, len(lines) + 1) is None
    long = write(open_folder / "long.py", "a = '" + "y" * (source_lines.LINE_LIMIT * 3) + "'\nb = 2\n")
    assert line(Path(long), NOBODY, 2) == "b = 2\n"



@given(st.lists(st.sampled_from([b"a", b"bc", b"x" * 37, b"\n", b"\r", b"\r\n", b"\t"]),
                max_size=16),
       st.integers(1, 18), st.sampled_from([1, 2, 5, 64]), st.sampled_from([1, 3, 16, 4096]))
def test_a_line_is_the_line_python_counts_whatever_the_block_and_line_limits(
        parts, number, block, limit):
    """`_line` reads blocks and keeps the start of a long line: the line it gives is the one
    bytes.splitlines (Python's line ends) gives, cut at LINE_LIMIT, whatever the boundaries."""
    import io

    data = b"".join(parts)
    want = next(iter(data.splitlines(keepends=True)[number - 1:number]), b"")[:limit]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(source_lines, "_BLOCK", block)
        patch.setattr(source_lines, "LINE_LIMIT", limit)
        assert source_lines._line(io.BufferedReader(io.BytesIO(data)), number) == want

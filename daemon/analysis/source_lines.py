"""The text of the user's line a stack frame points at, read only where its owner could read it.

The classifier reads it to see what a line calls into C (SOURCE_CALLS in
daemon.analysis.stack_rules); the daemon runs as root and the file name comes from the process,
so the read is guarded here: the path is walked one component at a time from the process's
root, each folder searched only where the process's user could search it and each link followed
only where that user's open would follow it, and the file read only where that user could read
it (`Credentials`, from /proc/PID/status). What is read goes through the redactor.
"""

from __future__ import annotations

import ctypes
import errno
import io
import os
import queue
import stat
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from daemon.sources.frames import Frame
from daemon.sources.redact import redact_code

SourceLine = Callable[[Frame], "str | None"]

FILE_LIMIT = 4 << 20  # a source file anyone wrote by hand is smaller
LINE_LIMIT = 16 << 10  # of a longer line, the start (it is redacted and cut for display anyway)
MAX_LINKS = 40  # as the kernel's path walk (MAXSYMLINKS)
MAX_COMPONENTS = 256  # a path of more folders than this is no source file's
# Capability bits (linux/capability.h) that let a process read any file and search any folder.
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2

READ, SEARCH = 4, 1  # permission bits, as in a mode's rwx triple and a POSIX ACL entry's perm

# POSIX ACL xattr (linux/posix_acl_xattr.h): a version, then (tag u16, perm u16, id u32) entries.
_ACL_XATTR = "system.posix_acl_access"
_ACL_HEADER, _ACL_ENTRY = struct.Struct("<I"), struct.Struct("<HHI")
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK, _ACL_OTHER = (
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20)


@dataclass(frozen=True)
class Credentials:
    """Whose access a read is checked against: a process's filesystem user and groups (the ids
    the kernel checks a file's permissions with), and whether it may read anything
    (CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH in the host's user namespace, as root has)."""

    uid: int
    gids: frozenset[int]
    reads_anything: bool = False


ANYONE = Credentials(uid=-1, gids=frozenset())  # no one's: only what every user may read
ROOT = Credentials(uid=0, gids=frozenset({0}), reads_anything=True)


def credentials(pid: int) -> Credentials | None:
    """The credentials process `pid` opens files with (its fsuid, fsgid and supplementary
    groups, its effective capabilities), from /proc/PID/status; None where it is gone or they
    cannot be read. Capabilities count only in the daemon's own user namespace: a container's
    root has them over its namespace's files alone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
        uids = [int(u) for u in fields["Uid"].split()[:4]]  # real, effective, saved, filesystem
        gid_fields = [int(g) for g in fields["Gid"].split()[:4]]
        groups = [int(g) for g in fields.get("Groups", "").split()]
        caps = int(fields["CapEff"].strip(), 16)
        ours = os.stat("/proc/self/ns/user")
        theirs = os.stat(f"/proc/{pid}/ns/user")
    except (OSError, KeyError, IndexError, ValueError):
        return None
    if len(uids) < 4 or len(gid_fields) < 4:
        return None
    if len(set(uids)) > 1 or len(set(gid_fields)) > 1:
        # A set-user-ID or set-group-ID program (passwd, or one the user exec'd since its stack
        # was dumped): its extra rights are the program's, not its user's. Its real user and
        # group, without capabilities: what the user who started it may read.
        return Credentials(uids[0], frozenset({gid_fields[0], *groups}), reads_anything=False)
    same_namespace = (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino)
    overrides = bool(caps & (1 << CAP_DAC_OVERRIDE | 1 << CAP_DAC_READ_SEARCH))
    return Credentials(uids[3], frozenset({gid_fields[3], *groups}),
                       reads_anything=same_namespace and overrides)


def read_source_line(frame: Frame, reader: Credentials = ANYONE, root: str = "/") -> str | None:
    """The text of a frame's line from its file (redacted: `redact_code`), or None where it
    cannot be read or where `reader` could not read it (ANYONE: only what every user may read).

    mlcostd runs as root and a frame's file name comes from the process: a user whose code
    names /etc/shadow, or a file in a folder only root may enter, in a frame must not get a line
    of it back in the evidence. So the path is resolved here from `root` (the process's
    /proc/PID/root), one component at a time, never by the kernel on root's behalf: each folder
    must let `reader` search it, each link is followed as the kernel would follow it for
    `reader` (see _resolve), and the file must be a regular file of at most FILE_LIMIT that
    `reader` may read. Mode bits, group membership and POSIX ACLs are checked; an LSM's (SELinux,
    AppArmor) rules are not.

    Not linecache: it keeps every file it read for good, and the daemon reads through
    /proc/PID/root, a new path for every process, so a host whose jobs come and go grew it
    without end (a whole file, up to 4 MiB, per process). Here one line is read and the last
    few hundred lines read are kept, each by its file's identity, size and mtime (after the
    check, so a line kept for one user is never given to another who could not read it)."""
    if not frame.filename.startswith("/") or frame.line < 1:
        return None  # "<frozen ...>", "<string>", or relative to a folder not known here
    handle = _resolve(root, frame.filename, reader)
    if handle is None:
        return None
    try:
        found = os.fstat(handle)
        if not stat.S_ISREG(found.st_mode) or found.st_size > FILE_LIMIT:
            return None  # not a source file anyone wrote by hand (a FIFO, a device, a folder)
        if not _grants(handle, found, reader, READ) or _kernel_made(handle):
            return None
        key = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, frame.line)
        with _SOURCE_LINES_LOCK:
            if key in _SOURCE_LINES:
                _SOURCE_LINES.move_to_end(key)
                return _SOURCE_LINES[key]
        # Reopened through the descriptor: the file checked is the file read, never a path
        # walked again. At most FILE_LIMIT bytes (a file grown since the fstat is cut there).
        # O_NONBLOCK: an open that would wait for a lease its owner holds (F_SETLEASE, which
        # the kernel breaks only after lease-break-time, 45 s) fails with EWOULDBLOCK instead;
        # the daemon's loop waited there, and a user who retook the lease held it for good.
        opened = os.open(f"/proc/self/fd/{handle}",
                         os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with os.fdopen(opened, "rb") as source:
            raw = _line(source, frame.line)
        text = redact_code(raw.decode("utf-8", errors="replace")) if raw else None
    except OSError:
        return None
    finally:
        os.close(handle)
    with _SOURCE_LINES_LOCK:
        _SOURCE_LINES[key] = text
        if len(_SOURCE_LINES) > SOURCE_LINES_KEPT:
            _SOURCE_LINES.popitem(last=False)
    return text


def _line(source: io.BufferedReader, number: int) -> bytes:
    """Line `number` (from 1) of `source`, with its line end, as Python counts lines (`\\n`,
    `\\r\\n` or `\\r` ends one); at most LINE_LIMIT bytes of it, and b"" where the file, read to
    FILE_LIMIT, has fewer lines. Read a block at a time, each split in C: the whole file read
    and split for one line cost ~11 times its size (a 4 MiB file raised the daemon's peak
    memory by 44 MB, probe 110)."""
    left, at, carry = FILE_LIMIT, 1, b""  # carry: the line the last block ended inside
    while left > 0:
        block = source.read(min(_BLOCK, left))
        if not block:
            break
        left -= len(block)
        pieces = (carry + block).splitlines(keepends=True)
        # its last piece goes on in the next block unless it ends with \n (a \r may be the
        # first half of a \r\n)
        carry = b"" if pieces[-1].endswith(b"\n") else pieces.pop()
        if number < at + len(pieces):
            return pieces[number - at][:LINE_LIMIT]
        at += len(pieces)
        if len(carry) > LINE_LIMIT + 1:  # a long line: its start, and its last byte (a \r?)
            carry = carry[:LINE_LIMIT] + carry[-1:]
    return carry[:LINE_LIMIT] if at == number else b""


_BLOCK = 64 << 10  # read and split at a time (a few thousand lines: some 200 KB of bytes objects)


SOURCE_LINES_KEPT = 512
_SOURCE_LINES: OrderedDict[tuple[int, int, int, int, int], str | None] = OrderedDict()
_SOURCE_LINES_LOCK = threading.Lock()  # the classifier may run on more than one thread


def source_lines_kept() -> int:
    """How many source lines the reader keeps now (never more than SOURCE_LINES_KEPT)."""
    return len(_SOURCE_LINES)


def _resolve(root: str, path: str, reader: Credentials) -> int | None:
    """An O_PATH descriptor of what absolute `path` names inside `root`, walked as `reader`'s
    open would walk it, or None where that open would fail.

    Every component is opened O_PATH | O_NOFOLLOW relative to its folder's descriptor (an
    O_PATH open never acts on a device and never follows a link): the kernel resolves nothing
    for root here. A folder is entered only where `reader` may search it; `..` never climbs above
    `root` (the process's own root, as chroot keeps it); a link is read and its target walked
    the same way, at most MAX_LINKS of them, and a link in a sticky folder others may write
    (/tmp) is followed only where `reader` or the folder's owner owns it (the kernel's
    fs.protected_symlinks, applied whatever that setting is)."""
    try:
        top = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    folders = [top]  # the descriptors from `root` down to the folder the walk is in
    left = path.split("/")[::-1]  # the components still to walk, the next one last
    links = 0
    try:
        while left:
            name = left.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if len(folders) > 1:
                    os.close(folders.pop())
                continue
            if len(left) + len(folders) > MAX_COMPONENTS:
                return None
            here = folders[-1]
            folder = os.fstat(here)
            if not _grants(here, folder, reader, SEARCH):
                return None
            found = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=here)
            try:
                what = os.fstat(found)
            except OSError:
                os.close(found)
                raise
            if stat.S_ISLNK(what.st_mode):
                os.close(found)
                links += 1
                if links > MAX_LINKS or not _may_follow(folder, what.st_uid, reader):
                    return None
                target = os.readlink(name, dir_fd=here)
                if target.startswith("/"):
                    while len(folders) > 1:
                        os.close(folders.pop())
                left.extend(target.split("/")[::-1])
                continue
            if not any(left):  # the last component (trailing slashes aside)
                return found
            if not stat.S_ISDIR(what.st_mode):
                os.close(found)
                return None  # a file named as a folder: ENOTDIR
            folders.append(found)
        return None  # the path named `root` itself, or only folders
    except (OSError, ValueError):
        return None
    finally:
        for handle in folders:
            os.close(handle)


# Kernel-made file systems (linux/magic.h): what their files hold is made at each read, and who
# may read it is decided at open or read time against the opener (a /proc/PID file needs ptrace
# access to PID; /proc/kallsyms shows addresses only to a reader with CAP_SYSLOG), not by the
# mode bits that _grants reads. Root opening one for a user would read what that user cannot.
# A source file is never on one of them.
KERNEL_MADE_FILE_SYSTEMS = frozenset({
    0x9FA0,  # proc
    0x62656572,  # sysfs
    0x64626720,  # debugfs
    0x74726163,  # tracefs
    0x73636673,  # securityfs
    0x62656570,  # configfs
    0x0027E0EB,  # cgroup
    0x63677270,  # cgroup2
    0xCAFE4A11,  # bpf
    0xDE5E81E4,  # efivarfs
    0x6165676C,  # pstore
    0xF97CFF8C,  # selinuxfs
    0x43415D53,  # smackfs
    0x07655821,  # resctrl
    0x65735543,  # fusectl
    0x42494E4D,  # binfmt_misc
    0x6E736673,  # nsfs
})


class _StatFs(ctypes.Structure):
    """The head of struct statfs (glibc and musl, x86_64 and aarch64): f_type, a long, first;
    room for the rest of it (120 bytes on x86_64)."""

    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 256)]


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.fstatfs.argtypes = [ctypes.c_int, ctypes.POINTER(_StatFs)]


def _kernel_made(handle: int) -> bool:
    """Whether the file open as `handle` (an O_PATH descriptor: fstatfs takes one) is on a
    KERNEL_MADE_FILE_SYSTEMS file system, or fstatfs cannot say (the safe side)."""
    found = _StatFs()
    if _LIBC.fstatfs(handle, ctypes.byref(found)) != 0:
        return True
    return (found.f_type & 0xFFFFFFFF) in KERNEL_MADE_FILE_SYSTEMS


def _may_follow(folder: os.stat_result, link_owner: int, reader: Credentials) -> bool:
    """fs.protected_symlinks: in a sticky, world-writable folder a link is followed only by its
    owner or where the folder's owner owns it (another user's link there may be a trap)."""
    if not (folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH):
        return True
    return link_owner in (reader.uid, folder.st_uid)


def _grants(handle: int, found: os.stat_result, reader: Credentials, want: int) -> bool:
    """Whether `reader` has permission `want` (READ or SEARCH) on the file open as `handle`,
    as the kernel decides it (generic_permission): a process that reads anything has it; else
    the owner's bits for its owner, the group's for a member of its group, the others' for the
    rest; a POSIX ACL, where the file has one, in their place."""
    if reader.reads_anything:
        return True
    acl = _acl(handle)
    if acl is not None:
        return _acl_grants(acl, found, reader, want)
    mode = found.st_mode
    if found.st_uid == reader.uid:
        bits = mode >> 6
    elif found.st_gid in reader.gids:
        bits = mode >> 3
    else:
        bits = mode
    return bits & want == want


def _acl(handle: int) -> list[tuple[int, int, int]] | None:
    """The file's access ACL entries (tag, perm, id), or None where it has none. One that
    cannot be read or parsed is an ACL that grants nothing (the safe side)."""
    try:
        # getxattr through the descriptor's /proc link: fgetxattr does not take an O_PATH one.
        data = os.getxattr(f"/proc/self/fd/{handle}", _ACL_XATTR)
    except OSError as error:
        if error.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return None
        return []
    body = data[_ACL_HEADER.size:]
    if len(data) < _ACL_HEADER.size or len(body) % _ACL_ENTRY.size:
        return []
    return [entry for entry in _ACL_ENTRY.iter_unpack(body)]


def _acl_grants(acl: list[tuple[int, int, int]], found: os.stat_result, reader: Credentials,
                want: int) -> bool:
    """The POSIX ACL access check (posix_acl_permission): the owner entry for the owner, a
    named user's entry (under the mask) for that user, any matching group entry that grants
    `want` (under the mask) for a member of a matching group, else the others' entry."""
    mask = next((perm for tag, perm, _ in acl if tag == _ACL_MASK), 0o7)
    if found.st_uid == reader.uid:
        return any(tag == _ACL_USER_OBJ and perm & want == want for tag, perm, _ in acl)
    for tag, perm, who in acl:
        if tag == _ACL_USER and who == reader.uid:
            return perm & mask & want == want
    groups = [perm for tag, perm, who in acl
              if tag == _ACL_GROUP_OBJ and found.st_gid in reader.gids
              or tag == _ACL_GROUP and who in reader.gids]
    if groups:
        return any(perm & mask & want == want for perm in groups)
    return any(tag == _ACL_OTHER and perm & want == want for tag, perm, _ in acl)


def source_reader(pid: int, before: Credentials | None) -> SourceLine:
    """Reads a frame's line through /proc/PID/root, so paths inside a container resolve, and
    only where the process's own user could read the file: its credentials are read from /proc
    once, here (a process gone by then gets no line read), and must be `before`, those read
    before its stack was dumped. A process whose rights changed in between (it exec'd a
    set-user-ID program, or file capabilities, after the dump took frames of the image before;
    or its pid is another process's now) gets no line read: the frames are the old image's,
    the rights the new one's."""
    reader = credentials(pid)
    if reader != before:
        reader = None
    root = f"/proc/{pid}/root"
    read_once: dict[tuple[str, int], str | None] = {}  # one dump's classification asks again

    def read(frame: Frame) -> str | None:
        if reader is None:
            return None
        at = (frame.filename, frame.line)
        if at not in read_once:  # (the path walked once per line and dump, not per question)
            read_once[at] = _READS.read(frame, reader, root)
        return read_once[at]

    return read


READ_WAIT_S = 0.5  # how long the classifier waits for one line (a read takes 0.03-0.3 ms)


class _Lane:
    """Source lines read in a thread of their own, each waited for at most READ_WAIT_S.

    The classifier runs on the daemon's event loop, and a read of a file of the user's choice
    can hang (a hard NFS mount whose server is gone, a FUSE file system whose process stops
    answering): the loop would hang with it, and every tick. Here the read runs in one daemon
    thread of its own (a hung one never holds the daemon's exit); a read that does not end
    within READ_WAIT_S gives no line, and while it still hangs every later read gives none at
    once (nothing queues behind it, no thread is added): the stacks are classified without
    their lines until it ends."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Frame, Credentials, str, threading.Event,
                                            list[str | None]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._last: threading.Event | None = None  # set when the last read asked for ended
        self.given_up = 0  # reads not waited for to the end (tests count them)

    def read(self, frame: Frame, reader: Credentials, root: str) -> str | None:
        if self._last is not None and not self._last.is_set():
            self.given_up += 1
            return None  # the last read still hangs
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="source-lines", daemon=True)
            self._thread.start()
        done, answer = threading.Event(), list[str | None]()
        self._last = done
        self._jobs.put((frame, reader, root, done, answer))
        if not done.wait(READ_WAIT_S):
            self.given_up += 1
            return None
        return answer[0] if answer else None

    def _run(self) -> None:
        while True:
            frame, reader, root, done, answer = self._jobs.get()
            try:
                answer.append(read_source_line(frame, reader, root))
            except Exception:  # (it returns None on errors it knows; never the thread's end)
                answer.append(None)
            finally:
                done.set()


LANES = 16  # threads that read lines at most; a process's user id picks its lane


class _LineReads:
    """The lanes (`_Lane`) source lines are read in, one per user id modulo LANES: a user
    whose file hangs a read stops the lines of the users of that lane only (one lane for
    everyone gave every user's stacks no line while one user's FUSE mount hung, probe 110).
    A lane's thread starts with its first read."""

    def __init__(self) -> None:
        self._lanes: dict[int, _Lane] = {}
        self._lock = threading.Lock()  # (the classifier may run on more than one thread)

    def read(self, frame: Frame, reader: Credentials, root: str) -> str | None:
        with self._lock:
            lane = self._lanes.get(reader.uid % LANES)
            if lane is None:
                lane = self._lanes[reader.uid % LANES] = _Lane()
        return lane.read(frame, reader, root)

    @property
    def given_up(self) -> int:
        """Reads not waited for to the end, in every lane (tests count them)."""
        return sum(lane.given_up for lane in self._lanes.values())


_READS = _LineReads()

"""Every file mlcostd creates or touches goes through here: private, never through a planted
link, never a file that is not its own.

mlcostd runs as root, and it writes into folders that a local user may be able to write too.
So a path is never trusted, only an opened descriptor:

- every file is opened with O_NOFOLLOW (a symbolic link at the path fails the open, it is never
  followed), O_CLOEXEC and O_NONBLOCK (a FIFO planted at the path cannot hang the open);
- the opened file is checked with fstat: a regular file, owned by mlcostd's user, with one link
  (a hard link to /etc/shadow has two) -- anything else is refused with RefusedFile, whose
  message names the file and the fix; a refused file is left where it is, never moved or
  removed;
- modes are changed with fchmod on that descriptor, never by path: created 0600 whatever the
  umask, and an existing file of ours wider than 0600 is narrowed;
- a folder mlcostd keeps files in is refused (`folder_problem`) when another user could
  replace what is in it: a group- or world-writable folder without the sticky bit, or one
  owned by another user, it or any folder above it;
- an HTML page (`write_page`) replaces only an earlier page or an empty file, never a store
  or anything else (`page_problem`): `report --html mlcost.db` wrote a page over a live store;
- temporary files are named `.NAME.tmp-PID-RANDOM` (`temp_path`), so that files left by a
  writer killed mid-way are found and removed (`remove_stale_temp_files`) once that process
  is gone.

The store holds every command line, stack and cost of the host, so a 0644 database in a 0755
folder (SQLite's default under the usual umask 022) would let any local user read all of it.
SQLite creates `-wal` and `-shm` with the mode of the database file (and opens them with
O_NOFOLLOW itself), so a database created 0600 keeps them 0600 too.
"""

from __future__ import annotations

import errno
import os
import pwd
import re
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

PRIVATE_FOLDER = 0o700
ABOVE_FOLDER = 0o755  # a folder mlcostd makes above a private one, less what the umask takes
PRIVATE_FILE = 0o600
DB_SUFFIXES = ("", "-wal", "-shm")  # the database and the files SQLite keeps beside it

# `.NAME.tmp-PID-RANDOM`: what temp_path makes; the pid says who may still be writing it.
_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.tmp-(?P<pid>[0-9]{1,10})-(?P<token>[0-9a-f]{8})")
_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class RefusedFile(OSError):
    """A file or folder mlcostd will not use (a link, not its own, writable by others); the
    message (str() and .strerror) names it and says what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EPERM, message)

    def __str__(self) -> str:
        return str(self.strerror)


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "no such user"


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _link_message(path: str) -> str:
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return (f"{path} is a symbolic link{target}; mlcostd runs as root and never follows a link "
            f"it did not make (whoever planted it would choose the file it writes): remove "
            f"the link, or give mlcostd the real path")


def check_file(info: os.stat_result, path: str | os.PathLike[str]) -> None:
    """Refuse (RefusedFile) a file that is not a regular file owned by mlcostd's user with
    exactly one link; `info` is its fstat (or lstat, before it is opened)."""
    path = os.fspath(path)
    if stat.S_ISLNK(info.st_mode):
        raise RefusedFile(_link_message(path))
    if not stat.S_ISREG(info.st_mode):
        raise RefusedFile(f"{path} is {_kind(info.st_mode)}, not a regular file; mlcostd "
                          "leaves it alone: move it away or give mlcostd another path")
    me = os.geteuid()
    if info.st_uid != me:
        raise RefusedFile(f"{path} is owned by uid {info.st_uid} ({_user(info.st_uid)}), not "
                          f"by mlcostd's user uid {me} ({_user(me)}), so it is not a file "
                          "mlcostd made: remove it (mlcostd makes its own), or "
                          f"`chown {me} {path}` if you trust it")
    if info.st_nlink != 1:
        raise RefusedFile(f"{path} has {info.st_nlink} hard links (other names for the same "
                          "file, which may be someone else's); mlcostd uses only a file with "
                          f"one name: remove the other links (`find / -xdev -samefile {path}` "
                          "lists them) or give mlcostd another path")


def open_checked(path: str | os.PathLike[str], flags: int = os.O_RDONLY, *,
                 create: bool = False) -> int:
    """Open `path` without following a link and return the descriptor, once fstat says it is
    a regular file of mlcostd's user with one link (`check_file`); with `create`, a missing
    file is created 0600 less the umask (never wider). Modes are left as they are (see
    open_private).
    Raises RefusedFile for a link or a file that is not ours, FileNotFoundError when missing
    (and not `create`), OSError otherwise."""
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    if create:
        flags |= os.O_CREAT
    # O_TRUNC empties the file at the open, before fstat can say whose it is (a hard link to
    # someone else's file was refused after it was emptied): truncated once it is checked
    truncate, flags = bool(flags & os.O_TRUNC), flags & ~os.O_TRUNC
    try:
        fd = os.open(path, flags, PRIVATE_FILE)
    except OSError as exc:
        # ELOOP: O_NOFOLLOW met a link (Linux); EISDIR/ENXIO: a folder or a FIFO/socket there;
        # EACCES: in a sticky folder, another user's link or file (fs.protected_*) said only
        # "Permission denied"
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.EISDIR, errno.ENXIO, errno.EACCES):
            try:
                check_file(os.lstat(path), path)
            except FileNotFoundError:
                pass
        raise
    try:
        info = os.fstat(fd)
        check_file(info, path)
        # O_NONBLOCK only kept a FIFO from hanging the open; a regular file does not need it
        os.set_blocking(fd, True)
        if truncate:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private(path: str | os.PathLike[str], flags: int = os.O_RDWR, *,
                 create: bool = True) -> int:
    """Open (creating if missing, unless not `create`) a private file of mlcostd's: checked
    as open_checked does, and narrowed to 0600 with fchmod on the descriptor when it is wider.
    Returns the descriptor. Raises RefusedFile, OSError."""
    fd = open_checked(path, flags, create=create)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & ~PRIVATE_FILE:
            os.fchmod(fd, mode & PRIVATE_FILE)
    except OSError:
        os.close(fd)
        raise
    return fd


def private_database(path: str | os.PathLike[str]) -> None:
    """Before SQLite opens `path`: the database file exists, ours, with mode 0600 (SQLite then
    creates its WAL and SHM 0600 too), and a WAL or SHM there already is ours too and narrowed
    when an older mlcostd left it wider. A link or someone else's file at any of the three is
    refused (RefusedFile) and left alone. Raises OSError."""
    if os.fspath(path) in ("", ":memory:"):
        return  # no file
    os.close(open_private(path))
    for suffix in DB_SUFFIXES[1:]:
        try:
            os.close(open_private(os.fspath(path) + suffix, create=False))
        except FileNotFoundError:
            continue  # SQLite makes it, with the database's mode


def check_existing(path: str | os.PathLike[str]) -> None:
    """Refuse (RefusedFile) what is at `path` now unless it is nothing or a file mlcostd may
    use (`check_file`), before anything is created; the open checks it again on its
    descriptor."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    check_file(info, path)


# O_PATH: a folder is passed through with search permission alone, as a path lookup needs
_FOLDER_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_MAX_LINKS = 40  # as the kernel's own limit on links in one path


class ForeignLink(RefusedFile):
    """A symbolic link on a folder's path that a user other than root or mlcostd's owns:
    whoever owns it can point it anywhere, so it is never followed."""

    def __init__(self, path: Path, target: str, uid: int) -> None:
        self.path = path
        self.reason = (f"is a symbolic link (to {target}) owned by uid {uid} ({_user(uid)}), "
                       "who can point it anywhere")
        super().__init__(f"{path} {self.reason}; mlcostd runs as root and never follows a "
                         "link that a user other than root or its own could have planted: "
                         "remove the link, or give mlcostd the real path")


class _Fault(Exception):
    """A folder on the path that another user could change (`_judge`)."""

    def __init__(self, path: Path, reason: str, itself: bool) -> None:
        super().__init__(reason)
        self.path, self.reason, self.itself = path, reason, itself


def _judge(sticky_ok: bool) -> Callable[[Path, os.stat_result, bool], None]:
    """The rule for a folder mlcostd keeps files in, for `_walk` to apply to each folder it
    passes through (`itself`: the last one): owned by root or mlcostd's user, and writable by
    no one else unless sticky like /tmp (with `sticky_ok` False, not even then for the folder
    itself). Raises _Fault."""
    def judge(path: Path, info: os.stat_result, itself: bool) -> None:
        mode = stat.S_IMODE(info.st_mode)
        sticky = bool(mode & stat.S_ISVTX) and (sticky_ok or not itself)
        if mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky:
            # "without the sticky bit" only where a sticky folder would pass
            allowed = sticky_ok or not itself
            missing = "" if mode & stat.S_ISVTX or not allowed else " without the sticky bit"
            raise _Fault(path, f"is writable by its group or by everyone (mode {mode:o})"
                               f"{missing}", itself)
        if info.st_uid not in (0, os.geteuid()):
            raise _Fault(path, f"is owned by uid {info.st_uid} ({_user(info.st_uid)})", itself)
    return judge


def _walk(folder: Path, *, create: bool,
          judge: Callable[[Path, os.stat_result, bool], None] | None = None) -> bool:
    """Walk `folder` from / a component at a time, each opened relative to the one before with
    O_NOFOLLOW, `judge` called on each folder passed through (its fstat) before anything in
    it is looked at: a symbolic link is followed only when root or mlcostd's user owns it
    (another user's link is refused, ForeignLink, whatever it points at), so a path walked
    here and used after cannot be redirected by a link someone else planted. With `create`,
    each missing component is made relative to its folder's descriptor (the folder itself
    0700 whatever the umask, those above it 0755 less what the umask takes) and opened again without
    following, then judged (one planted in between is judged, or refused as a link); without,
    the walk stops at the first missing one, which mlcostd would create. Returns whether it
    created `folder`. Raises ForeignLink, _Fault (from `judge`), NotADirectoryError (a file
    in the way), OSError."""
    pending = list(reversed((Path.cwd() / folder).parts))  # `..` kept: the kernel's meaning
    here = Path("/")
    fd = os.open("/", _FOLDER_FLAGS)
    links = 0
    created = False
    try:
        if judge is not None:
            judge(here, os.fstat(fd), not pending[:-1])
        while pending:
            name = pending.pop()
            if name in ("/", "."):
                continue
            if name == "..":
                new = os.open("..", _FOLDER_FLAGS, dir_fd=fd)
                os.close(fd)
                fd, here = new, here.parent
                if judge is not None and not pending:  # the folder itself, as `x/..` names it
                    judge(here, os.fstat(fd), True)
                continue  # (judged as a folder above on the way down)
            created = False
            try:
                new = os.open(name, _FOLDER_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    return False
                try:
                    # (a folder above never writable by others, whatever the umask: one left
                    # 0777 under umask 000 let any user rename the private folder in it and
                    # put their own in its place)
                    os.mkdir(name, PRIVATE_FOLDER if not pending else ABOVE_FOLDER, dir_fd=fd)
                except FileExistsError:  # made by someone else meanwhile: looked at again
                    pending.append(name)
                    links += 1
                    if links > _MAX_LINKS:
                        raise
                    continue
                new = os.open(name, _FOLDER_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                created = True
                if not pending:  # the folder itself: 0700 even under a umask like 0777,
                    # on the folder just opened (an O_PATH descriptor cannot be fchmodded)
                    made = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,
                                   dir_fd=new)
                    try:
                        os.fchmod(made, PRIVATE_FOLDER)
                    finally:
                        os.close(made)
            except OSError as exc:
                # O_NOFOLLOW|O_DIRECTORY at a link: ENOTDIR (ELOOP without O_DIRECTORY)
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(info.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, "Not a directory",
                                             str(here / name)) from None
                target = os.readlink(name, dir_fd=fd)
                if info.st_uid not in (0, os.geteuid()):
                    raise ForeignLink(here / name, target, info.st_uid) from None
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(folder)) from None
                # a link root or mlcostd's user made, in a folder judged already
                if target.startswith("/"):
                    os.close(fd)
                    fd, here = os.open("/", _FOLDER_FLAGS), Path("/")
                pending.extend(reversed(Path(target).parts))
                continue
            os.close(fd)
            fd, here = new, here / name
            if judge is not None:
                judge(here, os.fstat(fd), not pending)
        return created
    finally:
        os.close(fd)


def private_folder(folder: Path) -> bool:
    """Create `folder` 0700 (the folders above it 0755 less the umask) unless it exists; an
    existing folder is used as it is (never chmodded: a folder shared with others must not
    change). No link on the way is followed unless root or mlcostd's user owns it (`_walk`):
    another user's link at the folder or above it is refused (ForeignLink, a RefusedFile),
    never used. Returns whether it was created. Raises RefusedFile, OSError when it cannot
    be created."""
    return _walk(folder, create=True)


def _folder_fault(folder: Path, sticky_ok: bool, *,
                  create: bool = False) -> tuple[tuple[Path, str, bool] | None, bool]:
    """((the folder at fault, why, whether it is `folder` itself) or None when safe, whether
    `folder` was created) for folder_problem and check_folder: `_walk` with `_judge`, so
    nothing is created inside a folder that fails."""
    try:
        return None, _walk(folder, create=create, judge=_judge(sticky_ok))
    except _Fault as fault:
        return (fault.path, fault.reason, fault.itself), False
    except ForeignLink as link:
        return (link.path, link.reason, link.path == Path.cwd() / folder), False
    except NotADirectoryError as exc:
        culprit = Path(exc.filename or folder)
        return (culprit, "is not a directory", culprit == Path.cwd() / folder), False
    except OSError as exc:
        if create:
            raise
        return (folder, f"cannot be checked ({exc.strerror})", True), False


def folder_problem(folder: Path, *, sticky_ok: bool = True) -> str | None:
    """Why another user could replace what mlcostd keeps in `folder`, as the end of a sentence
    about it ("is writable by its group or by everyone (mode 777) without the sticky bit", "is
    inside /x, which is owned by uid 1000 (ann)", "is a symbolic link (to /y) owned by uid
    1001 (eve), who can point it anywhere"), or None when it is safe: every folder its path
    passes through is a directory owned by root or mlcostd's user that no one else can write,
    unless sticky like /tmp (with `sticky_ok` False, the folder itself must not be writable by
    others even then), and every link on it is root's or mlcostd's user's. A folder that does
    not exist yet is judged by those above it (mlcostd creates it 0700)."""
    fault, _created = _folder_fault(folder, sticky_ok)
    return None if fault is None else _said(fault)


def _said(fault: tuple[Path, str, bool]) -> str:
    culprit, reason, itself = fault
    return reason if itself else f"is inside {culprit}, which {reason}"


def check_folder(folder: Path, what: str, fix: str, *, create: bool = False) -> bool:
    """Refuse (RefusedFile) the `what` folder `folder` (e.g. "database folder", "--out
    folder") when folder_problem finds one (sticky folders like /tmp pass): the one check of
    every folder mlcostd writes into, its own or one a user names. The message names the
    folder at fault and ends with the fix: `chmod go-w` it (or `chmod +t`, for a folder shared
    on purpose), remove another user's link, or `fix` (another path). With `create`, the
    missing folders are created as they are checked, as private_folder does, and whether
    `folder` was is returned. Raises RefusedFile, OSError (it cannot be created)."""
    fault, created = _folder_fault(folder, sticky_ok=True, create=create)
    if fault is None:
        return created
    culprit, reason, _itself = fault
    hint = (f"run `chmod go-w {culprit}` (or `chmod +t {culprit}` if others must write there) "
            "or " if "writable" in reason else
            f"remove the link {culprit} (mlcostd follows only root's and its own) or "
            if "symbolic link" in reason else "")
    raise RefusedFile(f"the {what} {folder} {_said(fault)}, so another user could replace the "
                      f"files mlcostd keeps there; {hint}{fix}")


# -- temporary files -----------------------------------------------------------------------


def temp_path(target: Path) -> Path:
    """A fresh temporary name beside `target`: `.NAME.tmp-PID-RANDOM`, hidden from listings,
    and found by remove_stale_temp_files once this process is gone."""
    return target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def temp_owner(name: str) -> int | None:
    """The pid in a name made by temp_path, None for any other name (fullmatch: nothing may
    follow, not even a newline)."""
    found = _TEMP_NAME.fullmatch(name)
    return int(found.group("pid")) if found else None


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists (a signal 0 reaches it, or it is someone else's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process (mlcostd not root)
    return True


def remove_stale_temp_files(folder: Path) -> list[str]:
    """Remove the temporary files (temp_path's names) in `folder` whose writer is gone (no
    process has the pid in the name), as a writer killed with SIGKILL leaves them. Only our
    own regular files, never followed: a link or someone else's file is left alone. Returns
    the paths removed. Never raises."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        pid = temp_owner(name)
        if pid is None or pid == os.getpid() or process_alive(pid):
            continue
        path = folder / name
        try:
            check_existing(path)
            os.unlink(path)
        except OSError:
            continue
        removed.append(str(path))
    return removed


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically with mode 0600: a fresh temporary name beside it,
    created exclusively (never a file or link someone put there), synced, then renamed over
    `path`, which must be nothing yet or a file mlcostd may use (`check_existing`: a link,
    a FIFO, a device or someone else's file there is refused, not replaced). The folder is
    created 0700 when missing. Raises RefusedFile, OSError."""
    check_existing(path)
    private_folder(path.parent)
    tmp = temp_path(path)
    fd = open_private(tmp, os.O_WRONLY | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# -- HTML pages ----------------------------------------------------------------------------

# What an HTML output may replace: a page mlcost wrote, which begins with `<!doctype html`
# (any case; every page of daemon/report_html does), or an empty file (`mktemp` makes one).
# An SQLite file begins with SQLITE_HEADER: the store, a snapshot, a profile.db.
PAGE_START = b"<!doctype html"
SQLITE_HEADER = b"SQLite format 3\x00"


def page_problem(path: str | os.PathLike[str],
                 inputs: tuple[str | os.PathLike[str], ...] = ()) -> str | None:
    """Why an HTML page may not be written at `path`, as a sentence naming it and saying what
    to do; None when it may: nothing is there yet, or a page (see PAGE_START) or an empty file
    of mlcostd's user, in a folder that exists (a typo must not make folders as root), and it
    is none of `inputs` (the store or file the page is made from, or SQLite's files beside
    it), and its folder passes check_folder. One rule for every HTML writer: write_page
    checks it again at the write."""
    path = os.fspath(path)
    for given in inputs:
        source = os.fspath(given)
        for tail in DB_SUFFIXES:
            try:
                same = os.path.samefile(source + tail, path)
            except OSError:
                continue
            if same:
                what = ("the file the page is made from" if not tail else
                        f"SQLite's {tail} file of {source}, what the page is made from")
                named = "" if tail or source == path else f" ({source})"
                return (f"{path} is {what}{named}; writing the page there would destroy it: "
                        f"give the page a name of its own, e.g. {_page_name(path)}")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        return (f"there is no folder {folder} for {path}; create it first, or give a path in "
                "one that exists")
    try:  # no other user's link on its path, no folder on it another user can change
        check_folder(Path(folder), "page's folder", "give the page a path in a folder of your "
                     "own that no other user can write")
    except RefusedFile as exc:
        return str(exc)
    try:
        fd = open_checked(path)  # never through a link, a FIFO, someone else's or a hard link
    except FileNotFoundError:
        return None
    except OSError as exc:
        return str(exc) if isinstance(exc, RefusedFile) else \
            f"{path} cannot be read to check what it is ({exc.strerror}); give another path"
    try:
        head = os.read(fd, 64)
    except OSError as exc:
        return f"{path} cannot be read to check what it is ({exc.strerror}); give another path"
    finally:
        os.close(fd)
    if head.startswith(SQLITE_HEADER):
        return (f"{path} is an SQLite database (a store or a snapshot, perhaps one a daemon "
                "records into); an HTML page never replaces one: give the page a name of its "
                f"own, e.g. {_page_name(path)}")
    if head and not head.lstrip(b"\xef\xbb\xbf \t\r\n").lower().startswith(PAGE_START):
        return (f"{path} exists and is not a page mlcost wrote (it does not begin with "
                "<!doctype html); an HTML page replaces only an earlier page: give a new name, "
                "or remove it first")
    return None


def _page_name(path: str) -> str:
    """A page name to suggest instead of `path`: FILE.html for FILE.db, FILE.report.html for
    FILE.html."""
    stem, suffix = os.path.splitext(path)
    return f"{stem}.report.html" if suffix == ".html" else f"{stem}.html"


def check_page(path: str | os.PathLike[str],
               inputs: tuple[str | os.PathLike[str], ...] = ()) -> None:
    """Refuse (RefusedFile, page_problem's sentence) an HTML page at `path` that may not be
    written there."""
    problem = page_problem(path, inputs)
    if problem is not None:
        raise RefusedFile(problem)


def write_page(path: Path, page: str,
               inputs: tuple[str | os.PathLike[str], ...] = ()) -> None:
    """Write an HTML page atomically with mode 0600 (write_private) where check_page allows
    it: every HTML output of mlcostd is written here. Raises RefusedFile, OSError."""
    check_page(path, inputs)
    write_private(path, page.encode("utf-8"))

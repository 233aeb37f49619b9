"""mlcostd runs as root, so what it creates is private and what it finds is not taken over
(issue 10, Security 1, 2, 4 and the Permissions part of the Build list).

- The API socket's folder: created 0700 by mlcostd; an existing folder is used as it is if it
  is safe, refused with a clear message if its group or everyone can write it, never chmodded.
- Only a stale socket at the socket path is replaced; a regular file there is left alone.
- The store's folder 0700 when mlcostd creates it; the database, WAL, SHM and lock 0600 whatever
  the umask.
- A token file must belong to the daemon's user.

Real sockets and files; each test only looks at what it made. Each refusal is a unit test of
the check that makes it (daemon.api.server, daemon.store); one real daemon (tests/livedaemon.py)
per class proves the start-up runs that check before it creates anything: the socket folder,
the store's files, the token file. (tests/daemon/test_startup_errors.py does the same for the
config and the database path.)
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from daemon.api.server import ApiError, ApiServer, check_socket_folder, read_token
from daemon.store.writer import Store

OTHER_UID = 65534  # nobody: any uid other than ours will do


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@contextmanager
def umask(value: int) -> Iterator[None]:
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def stale_socket(path: Path) -> None:
    """A socket file left behind by a daemon that died: bound, never unlinked, nobody listens."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()


async def serve_once(folder_socket: Path,
                     while_serving: Callable[[], None] | None = None) -> None:
    """Check, start and stop the API alone on `folder_socket` (the socket part needs no
    daemon), as the daemon does at start-up (ApiServer.check first, before anything is
    created); `while_serving()` runs while it listens."""
    server = ApiServer(object(), folder_socket)
    server.check()
    await server.start()
    try:
        if while_serving is not None:
            while_serving()
    finally:
        await server.stop()


# -- Security 1: the socket folder and the socket path ------------------------------------


def test_a_socket_in_a_shared_folder_is_refused_and_the_folder_left_alone(tmp_path, mlcostd):
    shared = tmp_path / "shared"  # like /tmp: everyone may write, sticky
    shared.mkdir()
    shared.chmod(0o1777)
    refused = mlcostd("idle-host", wait=False, args=["--socket", str(shared / "mlcostd.sock")])
    assert refused.wait_exit() == 2
    log = refused.log()
    assert f"the socket folder {shared} is writable by its group or by everyone (mode 1777)" \
        in log, refused.log_tail()
    assert f"--socket {shared}/api/mlcostd.sock" in log  # the fix: a folder of its own
    assert "Traceback" not in log
    assert mode(shared) == 0o1777  # never chmodded
    assert not (shared / "mlcostd.sock").exists()
    # refused before anything starts: no store created, no workload run, no price looked up
    assert not refused.db.exists() and "simulating" not in log and "price" not in log, log


@pytest.mark.parametrize("folder_mode", [0o777, 0o1777])
def test_a_refused_socket_folder_says_what_is_accepted_and_a_fix_that_works(tmp_path,
                                                                            folder_mode):
    """A 0777 folder's refusal said "without the sticky bit", but a sticky one (1777, a
    memory emptyDir's) is refused too. The suggested --socket is one mlcostd accepts."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(folder_mode)
    with pytest.raises(ApiError) as refused:
        check_socket_folder(shared)
    said = str(refused.value)
    assert f"(mode {folder_mode:o}), so another user could replace the socket" in said, said
    assert "without the sticky bit" not in said
    assert "only root or its own user can write (the sticky bit is not enough" in said, said
    if folder_mode & stat.S_ISVTX:  # a folder of its own inside: accepted
        assert said.endswith(f"e.g. --socket {shared}/api/mlcostd.sock"), said
        check_socket_folder(shared / "api")
    else:  # a folder inside would be refused as well (its name could be renamed away)
        assert f"run `chmod go-w` on {shared}" in said, said
        with pytest.raises(ApiError, match=f"is inside {shared}, which is writable"):
            check_socket_folder(shared / "api")
    assert mode(shared) == folder_mode  # never chmodded


def test_a_group_writable_folder_is_refused_too(tmp_path):
    group = tmp_path / "group"
    group.mkdir()
    group.chmod(0o770)
    with pytest.raises(ApiError, match=r"writable by its group or by everyone \(mode 770\)"):
        asyncio.run(serve_once(group / "mlcostd.sock"))
    assert mode(group) == 0o770 and not (group / "mlcostd.sock").exists()


def test_a_safe_existing_folder_is_used_as_it_is(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    folder.chmod(0o750)  # safe (only its owner writes) but not 0700: must stay 0750

    def listening() -> None:
        assert stat.S_ISSOCK(os.lstat(folder / "mlcostd.sock").st_mode)
        assert mode(folder / "mlcostd.sock") == 0o660

    asyncio.run(serve_once(folder / "mlcostd.sock", listening))
    assert mode(folder) == 0o750


def test_a_folder_mlcostd_creates_is_0700_whatever_the_umask(tmp_path):
    folder = tmp_path / "new" / "api"
    with umask(0):
        asyncio.run(serve_once(folder / "mlcostd.sock"))
    assert mode(folder) == 0o700


def test_a_folder_owned_by_another_user_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another user (the daemon runs as root)")
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o755)
    os.chown(folder, OTHER_UID, -1)
    with pytest.raises(ApiError, match=f"owned by uid {OTHER_UID}"):
        asyncio.run(serve_once(folder / "mlcostd.sock"))
    assert mode(folder) == 0o755


def test_a_regular_file_at_the_socket_path_is_never_replaced(tmp_path):
    folder = tmp_path / "api"
    folder.mkdir(mode=0o700)
    precious = folder / "mlcostd.sock"
    precious.write_text("not a socket: someone's file\n")
    # ApiServer.check, which the daemon runs before it creates anything (as the shared-folder
    # test above proves end to end), refuses it
    with pytest.raises(ApiError, match=f"{precious} is a file that is not a socket.*move it "
                                       "away or pass a different --socket"):
        asyncio.run(serve_once(precious))
    assert precious.read_text() == "not a socket: someone's file\n"


def test_a_symlink_at_the_socket_path_is_never_followed_or_replaced(tmp_path):
    folder = tmp_path / "api"
    folder.mkdir(mode=0o700)
    target = tmp_path / "target"
    target.write_text("kept\n")
    (folder / "mlcostd.sock").symlink_to(target)
    with pytest.raises(ApiError, match="is a symbolic link"):
        asyncio.run(serve_once(folder / "mlcostd.sock"))
    assert (folder / "mlcostd.sock").is_symlink() and target.read_text() == "kept\n"


def test_a_stale_socket_is_replaced(tmp_path):
    (tmp_path / "api").mkdir(mode=0o700)
    path = tmp_path / "api" / "mlcostd.sock"
    stale_socket(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        with pytest.raises(ConnectionRefusedError):  # nobody listens on the stale one
            client.connect(str(path))

    def answers() -> None:  # a new socket, listening where the stale one was
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))

    asyncio.run(serve_once(path, answers))


# -- Security 2: the store's files ----------------------------------------------------------


def test_the_daemons_state_folder_is_0700_and_its_store_files_0600_whatever_the_umask(
        tmp_path, mlcostd):
    state = tmp_path / "state"
    with umask(0):  # the daemon inherits it: everything it creates would be 0666/0777
        daemon = mlcostd("idle-host", args=["--db", str(state / "mlcost.db")])
    daemon.db = state / "mlcost.db"  # where the test reads its ticks
    daemon.wait_for_ticks(2)
    assert mode(state) == 0o700
    for name in ("mlcost.db", "mlcost.db-wal", "mlcost.db-shm", "mlcost.db.lock"):
        path = state / name
        assert path.exists(), f"{path} missing (WAL mode keeps -wal and -shm while it runs)"
        assert mode(path) == 0o600, f"{path} is {mode(path):o}, not 600"
    assert daemon.stop() == 0


def test_folders_made_above_the_store_are_writable_by_no_one_else_whatever_the_umask(
        tmp_path, mlcostd):
    """Probe 142 H1: under umask 000 the folders mlcostd made above the store's were 0777, so
    any user could rename the private folder in them and put their own in its place (and
    mlcostd refused its own next start there). They are 0755 less the umask: never writable
    by the group or others. The daemon is started twice on the store: the second start is
    not refused."""
    db = tmp_path / "new" / "a" / "b" / "mlcost.db"
    for start in range(2):
        with umask(0):
            daemon = mlcostd("idle-host", args=["--db", str(db)])
        daemon.db = db
        daemon.wait_for_ticks(2 * (start + 1))
        assert daemon.stop() == 0
    assert mode(db.parent) == 0o700
    assert mode(tmp_path / "new") == 0o755 and mode(tmp_path / "new" / "a") == 0o755


def test_folders_made_above_the_socket_take_the_umask_but_no_write_for_others(tmp_path):
    with umask(0o027):  # what the umask takes stays taken
        asyncio.run(serve_once(tmp_path / "t027" / "x" / "api" / "mlcostd.sock"))
    assert mode(tmp_path / "t027") == 0o750 and mode(tmp_path / "t027" / "x") == 0o750
    with umask(0):
        asyncio.run(serve_once(tmp_path / "t000" / "x" / "api" / "mlcostd.sock"))
    assert mode(tmp_path / "t000") == 0o755 and mode(tmp_path / "t000" / "x") == 0o755
    assert mode(tmp_path / "t000" / "x" / "api") == 0o700


def test_the_store_folder_and_files_are_private_whatever_the_umask(tmp_path):
    db = tmp_path / "state" / "mlcost.db"
    with umask(0):
        store = Store(db)
    try:
        assert mode(db.parent) == 0o700
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert mode(path) == 0o600, f"{path} is {mode(path):o}, not 600"
    finally:
        store.close()


def test_an_existing_folder_is_kept_and_wide_store_files_are_narrowed(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o755)  # an operator's folder: not ours to change
    db = folder / "mlcost.db"
    store = Store(db)
    store.close()
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):  # as an older mlcostd left them
        if path.exists():
            path.chmod(0o644)
    store = Store(db)
    try:
        assert mode(folder) == 0o755
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert mode(path) == 0o600, f"{path} is {mode(path):o}, not 600"
    finally:
        store.close()


# -- Security 4: the token file's owner ---------------------------------------------------


def test_a_token_file_owned_by_another_user_is_refused(tmp_path, mlcostd):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user (the daemon runs as root)")
    token_file = tmp_path / "token"
    token_file.write_text("b" * 40 + "\n")
    token_file.chmod(0o600)
    os.chown(token_file, OTHER_UID, -1)
    with pytest.raises(ApiError, match=f"owned by uid {OTHER_UID} .* not by mlcostd's user"):
        read_token(token_file)
    refused = mlcostd("idle-host", wait=False,
                      args=["--listen", "127.0.0.1:0", "--token-file", str(token_file)])
    assert refused.wait_exit() == 2
    log = refused.log()
    assert f"token file {token_file} is owned by uid {OTHER_UID}" in log, refused.log_tail()
    assert "b" * 40 not in log and "Traceback" not in log  # never the token itself
    os.chown(token_file, os.geteuid(), -1)
    assert read_token(token_file) == "b" * 40


def test_a_token_symlink_is_refused_and_a_generated_token_is_0600(tmp_path):
    real = tmp_path / "real"
    real.write_text("c" * 40)
    real.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(ApiError, match="is a symbolic link"):
        read_token(link)
    made = tmp_path / "new" / "token"
    with umask(0):
        token = read_token(made)
    assert len(token) >= 16 and mode(made) == 0o600 and mode(made.parent) == 0o700


def test_the_token_files_folders_are_made_as_the_stores_whatever_the_umask(tmp_path):
    """Probe 142 H1: `--token-file` in folders that do not exist yet made them with pathlib
    (the ones above the last as the umask said: 0777 under umask 000)."""
    token_file = tmp_path / "tok" / "q" / "r" / "token"
    with umask(0):
        token = read_token(token_file)
    assert len(token) >= 40 and mode(token_file) == 0o600
    assert mode(tmp_path / "tok" / "q" / "r") == 0o700
    assert mode(tmp_path / "tok") == 0o755 and mode(tmp_path / "tok" / "q") == 0o755


def test_the_price_caches_folders_are_writable_by_no_one_else_whatever_the_umask(tmp_path):
    """The price cache mlcostd reads its prices from: a folder others could write let them
    replace it."""
    from pricing.cache import CachedPrice, read_cache, write_cache

    cache = tmp_path / "cache" / "mlcost" / "prices.json"
    with umask(0):
        write_cache(cache, [CachedPrice("aws", "us-east-1", "g5.xlarge", "on-demand", 0.99,
                                        1e9, "a refresh")])
    assert [p.per_hour for p in read_cache(cache)] == [0.99]
    assert mode(tmp_path / "cache") == 0o755 and mode(cache.parent) == 0o755


def test_the_simulated_starved_jobs_data_shard_is_0600_whatever_the_umask(tmp_path):
    """Probe 149 L3: the demo's data shard was 0644 in the simulated host's state dir, whose
    files README says are 0600 whatever the umask."""
    from daemon.sim.workloads.data_starved import write_dataset

    old = os.umask(0o022)
    try:
        path = write_dataset(tmp_path, 1)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_size == 1 << 20

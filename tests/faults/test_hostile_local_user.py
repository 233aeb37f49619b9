"""A hostile local user against the root daemon's files (issue 20, items 1, 3, 10 and 11, and
"Files as root" in its Build list).

mlcostd runs as root; a user who can write into a folder where it keeps files plants links
and hard links there, hoping the daemon chmods, overwrites or serves the file they point at.
These tests run as root too (like the daemon) and plant links only to files they made
themselves in their own tmp_path (never a real /etc file): a 0644 "victim" whose mode and
contents must come out unchanged, while the daemon refuses with a line naming the file.

In-process tests pin the files module (daemon/store/files.py), the store and the writer lock;
one real `mlcostd run --simulate` per class shows the refusal end to end.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import livedaemon
import pytest
import yarl

from daemon.store.files import (
    RefusedFile,
    check_folder,
    folder_problem,
    open_private,
    private_folder,
    remove_stale_temp_files,
    temp_path,
    write_private,
)
from daemon.store.lock import WriterLock
from daemon.store.snapshot import SnapshotError, prune, write_snapshot
from daemon.store.writer import Store, StoreError

VICTIM_TEXT = b"root:x:0:0:a file the attacker wants changed:/root:/bin/bash\n"
HOSTILE = "hostile local user"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def victim(folder: Path, name: str = "victim") -> Path:
    """A 0644 file of the test's own, standing in for /etc/passwd."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(VICTIM_TEXT)
    path.chmod(0o644)
    return path


def assert_untouched(path: Path) -> None:
    assert mode(path) == 0o644, f"{path} was chmodded to {mode(path):o}"
    assert path.read_bytes() == VICTIM_TEXT, f"{path} was written"


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def live_process() -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


# -- item 1: the store's files --------------------------------------------------------------


@pytest.mark.fault(HOSTILE, "the database path is a symlink to a 0644 file")
def test_a_database_link_is_refused_never_followed_and_never_moved_aside(tmp_path):
    target = victim(tmp_path / "elsewhere")
    db = tmp_path / "state" / "mlcost.db"
    db.parent.mkdir()
    db.symlink_to(target)
    with pytest.raises(StoreError, match=f"{db} is a symbolic link .* never follows a link"):
        Store(db)
    assert_untouched(target)
    assert db.is_symlink() and os.readlink(db) == str(target)  # not moved aside
    assert sorted(p.name for p in db.parent.iterdir()) == ["mlcost.db"]  # nothing created


@pytest.mark.fault(HOSTILE, "-wal, -shm and .lock planted as symlinks beside the database")
@pytest.mark.parametrize("suffix", ["-wal", "-shm", ".lock"])
def test_planted_wal_shm_and_lock_links_are_refused_and_their_targets_unchanged(
        tmp_path, suffix):
    target = victim(tmp_path / "elsewhere")
    db = tmp_path / "state" / "m.db"
    db.parent.mkdir()
    Store(db).close()  # a real store: the planted file sits beside a database of ours
    for extra in ("-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)
    planted = Path(f"{db}{suffix}")
    planted.symlink_to(target)
    with pytest.raises((StoreError, RefusedFile), match=f"{planted} is a symbolic link"):
        if suffix == ".lock":
            WriterLock(db).acquire()
        else:
            Store(db)
    assert_untouched(target)
    assert planted.is_symlink()


@pytest.mark.fault(HOSTILE, "the database path is a hard link to a 0644 file")
def test_a_hard_linked_database_is_refused_and_the_other_file_unchanged(tmp_path):
    target = victim(tmp_path / "elsewhere")
    db = tmp_path / "state" / "mlcost.db"
    db.parent.mkdir()
    os.link(target, db)
    with pytest.raises(StoreError, match=f"{db} has 2 hard links"):
        Store(db)
    assert_untouched(target)


@pytest.mark.fault(HOSTILE, "the database replaced by a symlink while recording")
def test_a_link_put_over_the_database_while_recording_is_left_alone(tmp_path):
    from daemon.sources.sample import HostPressure, Sample

    def tick(n: int) -> Sample:
        return Sample(ts=1_750_000_000.0 + n, tick=n, gpus=(), processes=(),
                      host=HostPressure(), nvml_status="ok")

    target = victim(tmp_path / "elsewhere")
    db = tmp_path / "state" / "mlcost.db"
    db.parent.mkdir()
    with Store(db) as store:
        assert store.write(tick(1))
        db.unlink()
        db.symlink_to(target)
        store.maintain(budget_s=1.0)
        assert "is a symbolic link" in (store.health.problem or "")
        assert db.is_symlink() and os.readlink(db) == str(target)  # not moved aside
        assert not [p for p in db.parent.iterdir() if ".replaced-" in p.name]
        assert_untouched(target)
        assert store.write(tick(2))  # into the open file
        db.unlink()  # what the message says to do
        store.maintain(budget_s=1.0)
        assert store.health.recreated and not db.is_symlink()
    assert_untouched(target)


def test_the_files_module_refuses_links_fifos_and_other_users_files(tmp_path):
    target = victim(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(RefusedFile, match="is a symbolic link"):
        open_private(link)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(RefusedFile, match="is a FIFO"):  # refused, not waited on
        open_private(fifo, os.O_WRONLY)
    theirs = tmp_path / "theirs"
    theirs.write_bytes(b"x")
    theirs.chmod(0o644)
    os.chown(theirs, 65534, -1)
    with pytest.raises(RefusedFile, match="owned by uid 65534"):
        open_private(theirs)
    assert mode(theirs) == 0o644
    assert_untouched(target)
    mine = tmp_path / "mine"
    mine.write_bytes(b"x")
    mine.chmod(0o644)
    os.close(open_private(mine))
    assert mode(mine) == 0o600  # our own file: narrowed, on the descriptor


def test_a_link_the_kernel_refuses_to_open_is_said_as_a_link(tmp_path, monkeypatch):
    """In a sticky folder with fs.protected_symlinks on, opening another user's link fails with
    EACCES before O_NOFOLLOW can say ELOOP: it read "Permission denied; give a writable path".
    (The sysctl is the host's: the kernel's answer is played here.)"""
    import errno

    from daemon.store import files

    link = tmp_path / "r.html"
    link.symlink_to(tmp_path / "victim")
    real_open = os.open

    def kernel_open(path, flags, mode=0o777):
        if os.fspath(path) == str(link):
            raise PermissionError(errno.EACCES, "Permission denied", str(link))
        return real_open(path, flags, mode)

    monkeypatch.setattr(files.os, "open", kernel_open)
    with pytest.raises(RefusedFile, match="is a symbolic link"):
        open_private(link, os.O_WRONLY | os.O_CREAT)
    plain = tmp_path / "plain.html"  # a file of ours the kernel refuses: its own error
    plain.write_bytes(b"x")
    link = plain
    with pytest.raises(PermissionError):
        open_private(plain, os.O_WRONLY)


@pytest.mark.fault(HOSTILE, "report --html and compare --html at a hard link to another file "
                            "or at another user's file")
def test_an_html_output_that_is_refused_is_left_as_it_was(tmp_path):
    """The page was opened with O_TRUNC: the file was emptied, then refused (a hard link to
    /etc/shadow, where fs.protected_hardlinks is 0, emptied by root)."""
    from daemon.sources.sample import GpuSample, Sample

    store = Store(str(tmp_path / "mlcost.db"))
    for i in range(10):  # a store with samples to report and compare
        store.write(Sample(ts=1_790_000_000.0 + i, tick=i + 1, gpus=(
            GpuSample(0, "GPU-0", "A100", utilization=50.0, memory_used_bytes=0,
                      memory_total_bytes=40 << 30),)))
    store.close()
    shutil.copyfile(tmp_path / "mlcost.db", tmp_path / "copy.db")  # (compare: two files)
    target = victim(tmp_path)
    hard = tmp_path / "hard.html"
    os.link(target, hard)
    theirs = tmp_path / "theirs.html"
    theirs.write_bytes(b"their page")
    os.chown(theirs, 65534, -1)
    for page, said in ((hard, "has 2 hard links"), (theirs, "owned by uid 65534")):
        for command in (["report", "--db", str(tmp_path / "mlcost.db"), "--html", str(page)],
                        ["compare", str(tmp_path / "mlcost.db"), str(tmp_path / "copy.db"),
                         "--html", str(page)]):
            done = subprocess.run([sys.executable, "-m", "daemon", *command], cwd=livedaemon.ROOT,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode != 0 and said in done.stderr, (command, done.stderr)
    assert_untouched(target)
    assert theirs.read_bytes() == b"their page"


@pytest.mark.fault(HOSTILE, "snapshot --out, profile outputs and --junit planted as a link or "
                            "a FIFO")
@pytest.mark.parametrize("plant", ["link", "fifo"])
def test_an_output_planted_as_a_link_or_a_fifo_is_refused_not_replaced(tmp_path, plant):
    target = victim(tmp_path)
    out = tmp_path / "out.db"
    if plant == "link":
        out.symlink_to(target)
    else:
        os.mkfifo(out)
    store = Store(str(tmp_path / "mlcost.db"))
    store.close()
    # (both wrote a temporary file and renamed it over what was planted there)
    with pytest.raises(SnapshotError, match="is a symbolic link|is a FIFO"):
        write_snapshot(tmp_path / "mlcost.db", out, 0.0, 1.0)
    with pytest.raises(RefusedFile, match="is a symbolic link|is a FIFO"):
        write_private(out, b"<testsuites/>")  # profile.json, summary.md, --junit
    assert out.is_symlink() if plant == "link" else out.is_fifo()
    assert_untouched(target)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_folder_others_can_write_is_refused_and_a_sticky_one_accepted(tmp_path):
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    assert folder_problem(open_folder) == (
        "is writable by its group or by everyone (mode 777) without the sticky bit")
    with pytest.raises(RefusedFile, match=f"run `chmod go-w {open_folder}`"):
        check_folder(open_folder, "database folder", "pass --db elsewhere")
    below = open_folder / "not-yet" / "state"  # judged by the folders above it
    assert folder_problem(below) == f"is inside {open_folder}, which is writable by its " \
        "group or by everyone (mode 777) without the sticky bit"
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp
    assert folder_problem(sticky) is None
    check_folder(sticky, "database folder", "pass --db elsewhere")
    assert folder_problem(sticky, sticky_ok=False) is not None  # the socket's stricter rule
    assert mode(open_folder) == 0o777 and mode(sticky) == 0o1777  # never chmodded


@pytest.mark.fault(HOSTILE, "mlcostd run --db through a symlink to a 0644 file")
def test_the_daemon_refuses_a_database_link_before_anything_starts(tmp_path):
    target = victim(tmp_path / "elsewhere")
    folder = tmp_path / "daemon"
    folder.mkdir()
    (folder / "mlcost.db").symlink_to(target)
    refused = livedaemon.start(folder, wait=False)
    assert refused.wait_exit() == 2, refused.log_tail()
    log = refused.log()
    assert f"{folder / 'mlcost.db'} is a symbolic link (to {target})" in log, log
    assert "Traceback" not in log and "simulating" not in log, log
    assert_untouched(target)
    assert (folder / "mlcost.db").is_symlink()
    assert not [p for p in folder.iterdir() if ".corrupt-" in p.name or p.name.endswith(
        (".lock", "-wal", "-shm"))]


@pytest.mark.fault(HOSTILE, "the snapshots folder's index planted as a link; a dangling link "
                            "at the next snapshot's name")
def test_a_planted_snapshot_index_is_refused_at_start_and_a_planted_name_is_passed_over(
        tmp_path):
    """In a shared (sticky) snapshots folder another user could plant the index as a link:
    the daemon started, and every snapshot failed with 503 and nothing in the log."""
    from daemon.store.snapshot import HTML_SUFFIX, INDEX_NAME, free_path

    target = victim(tmp_path / "elsewhere")
    folder = tmp_path / "daemon"
    (folder / "snapshots").mkdir(parents=True)
    (folder / "snapshots" / INDEX_NAME).symlink_to(target)
    refused = livedaemon.start(folder, wait=False)
    assert refused.wait_exit() == 2, refused.log_tail()
    assert f"{INDEX_NAME} is a symbolic link (to {target})" in refused.log(), refused.log()
    assert_untouched(target)
    # a dangling link at the name a snapshot would take (its page's): the next name is taken
    name = "mlcost-vm-20261205T001500Z-manual.db"
    (folder / "snapshots" / name).with_suffix(HTML_SUFFIX).symlink_to(tmp_path / "nothing")
    assert free_path(folder / "snapshots", name).name == "mlcost-vm-20261205T001500Z-manual-2.db"


@pytest.mark.fault(HOSTILE, "mlcostd run --db in a world-writable folder without the sticky bit")
def test_the_daemon_refuses_a_world_writable_state_folder(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    folder = tmp_path / "daemon"
    refused = livedaemon.start(folder, wait=False, args=["--db", str(shared / "m.db")])
    assert refused.wait_exit() == 2, refused.log_tail()
    log = refused.log()
    assert (f"the database folder {shared} is writable by its group or by everyone (mode 777) "
            "without the sticky bit") in log, log
    assert f"run `chmod go-w {shared}`" in log and "--db" in log, log
    assert "Traceback" not in log and "simulating" not in log, log
    assert list(shared.iterdir()) == [] and mode(shared) == 0o777


# -- items 3, 10, 11: the snapshots folder, through one live daemon -------------------------


@pytest.fixture(scope="module")
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def planted(tmp_path_factory, sleeper) -> dict[str, Path]:
    """Files the hostile user leaves in the snapshots folder before the daemon starts."""
    base = tmp_path_factory.mktemp("hostile")
    secret = victim(base / "elsewhere", "shadow")
    snapshots = base / "daemon" / "snapshots"
    snapshots.mkdir(parents=True)
    os.link(secret, snapshots / "hard.db")
    (snapshots / "soft.db").symlink_to(secret)
    (snapshots / "plain.db").write_bytes(VICTIM_TEXT)  # ours to root, but not a snapshot
    (snapshots / "a.db\n").write_bytes(VICTIM_TEXT)  # what `a.db%0a` would name
    stale = snapshots / f".mlcost-x.db.tmp-{dead_pid()}-0123abcd"
    live = snapshots / f".mlcost-y.db.tmp-{sleeper}-4567cdef"
    for temp in (stale, live):
        temp.write_bytes(b"half a snapshot")
    return {"base": base, "secret": secret, "snapshots": snapshots, "stale": stale,
            "live": live}


@pytest.fixture(scope="module")
def daemon(planted) -> Iterator[livedaemon.LiveDaemon]:
    running = livedaemon.start(planted["base"] / "daemon", interval=0.2)
    try:
        yield running
    finally:
        assert running.stop() == 0, running.log_tail()


async def _get(socket_path: Path, raw_path: str) -> tuple[int, bytes]:
    url = yarl.URL("http://x" + raw_path, encoded=True)  # sent as written: %0a stays %0a
    connector = aiohttp.UnixConnector(path=str(socket_path))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(url) as response:
            return response.status, await response.read()


def get(daemon: livedaemon.LiveDaemon, raw_path: str) -> tuple[int, bytes]:
    return asyncio.run(_get(daemon.socket, raw_path))


@pytest.mark.fault(HOSTILE, "a hard link, a symlink and an unindexed file in the snapshots "
                   "folder, fetched by name")
@pytest.mark.parametrize("name", ["hard.db", "soft.db", "plain.db"])
def test_a_planted_link_in_the_snapshots_folder_is_not_served(daemon, planted, name):
    status, body = get(daemon, f"/v1/snapshots/{name}")
    assert status == 404, body[:200]
    assert VICTIM_TEXT not in body
    assert_untouched(planted["secret"])


def test_a_snapshot_the_daemon_wrote_is_still_served(daemon):
    async def main() -> tuple[dict, int]:
        async with daemon.client() as client:
            taken = await client.take_snapshot(60)
            return taken, await client.download_snapshot(
                taken["name"], daemon.folder / "copy.db")

    daemon.wait_for_ticks(2)
    taken, size = asyncio.run(main())
    assert size == taken["bytes"] > 0
    assert (daemon.folder / "copy.db").read_bytes()[:16] == b"SQLite format 3\x00"


@pytest.mark.fault(HOSTILE, "GET /v1/snapshots/a.db%0a (a name with a final newline)")
def test_a_name_with_a_final_newline_is_refused(daemon, planted):
    status, body = get(daemon, "/v1/snapshots/a.db%0a")
    assert status == 400, body[:200]
    assert b"is not a snapshot file name" in body
    assert VICTIM_TEXT not in body


@pytest.mark.fault(HOSTILE, "temp files of a snapshot writer killed with SIGKILL, at start")
def test_stale_temp_files_are_removed_at_start_and_a_live_writers_kept(daemon, planted):
    assert not planted["stale"].exists(), daemon.log_tail()
    assert planted["live"].exists()
    assert f"removed {planted['stale']}" in daemon.log()


@pytest.mark.fault(HOSTILE, "temp files of a snapshot writer killed with SIGKILL, in pruning")
def test_pruning_removes_temp_files_whose_writer_is_gone(tmp_path, live_process):
    folder = tmp_path / "snapshots"
    folder.mkdir()
    target = victim(tmp_path / "elsewhere")
    stale = temp_path(folder / "mlcost-host-20261201T120000Z-manual.db")
    stale = stale.with_name(stale.name.replace(f"-{os.getpid()}-", f"-{dead_pid()}-"))
    stale.write_bytes(b"5 MB of an unfinished snapshot")
    live = folder / f".mlcost-b.db.tmp-{live_process.pid}-89abcdef"
    live.write_bytes(b"being written")
    linked = folder / f".mlcost-c.db.tmp-{dead_pid()}-00000000"
    linked.symlink_to(target)  # a planted link with a temp name: left alone
    removed = prune(folder, max_bytes=1 << 40, max_age_s=1e9)
    assert removed == [str(stale)]
    assert live.exists() and linked.is_symlink()
    assert_untouched(target)
    assert remove_stale_temp_files(folder) == []


@pytest.mark.fault(HOSTILE, "a cgroup named 'job_42\\n' to claim a Slurm job")
def test_owner_names_with_a_final_newline_are_not_taken():
    from daemon.sources.owners import owner_from_path

    assert owner_from_path("/system.slice/slurmstepd.scope/job_42/step_0") == {
        "slurm_job": "42", "slurm_step": "0"}
    assert "slurm_job" not in owner_from_path("/system.slice/slurmstepd.scope/job_42\n/step_0")


@pytest.mark.fault(HOSTILE, "links in the snapshots folder when it is pruned")
def test_pruning_leaves_planted_links_alone(tmp_path):
    folder = tmp_path / "snapshots"
    folder.mkdir()
    target = victim(tmp_path / "elsewhere")
    soft = folder / "mlcost-old-soft.db"
    soft.symlink_to(target)
    hard = folder / "mlcost-old-hard.db"
    os.link(target, hard)
    ours = folder / "mlcost-old-ours.db"
    ours.write_bytes(b"an old snapshot")
    for path in (soft, hard, ours):
        os.utime(path, (1, 1), follow_symlinks=False)  # older than any max_age
    assert prune(folder, max_bytes=0, max_age_s=1) == [str(ours)]
    assert soft.is_symlink() and hard.exists()
    assert_untouched(target)


# -- a folder a root command writes into, planted by a real unprivileged user ----------------
#
# The attacker is a real user (uid 65534, nobody) running `ln` and `mkdir` themselves, in a
# sticky world-writable folder as /tmp is (the kernel's fs.protected_symlinks off, as the
# probe found it, or a link in a folder that is not sticky: root followed it). The test's own
# tmp_path is under root's 0700 pytest folder, which that user cannot reach.

ATTACKER = 65534


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A fresh folder like /tmp (1777, root's) that the attacker can write into."""
    folder = Path(tempfile.mkdtemp(prefix="mlcost-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def as_attacker(*argv: str) -> None:
    """Run `argv` as the unprivileged attacker (no supplementary groups)."""
    subprocess.run(argv, user=ATTACKER, group=ATTACKER, extra_groups=[], check=True,
                   capture_output=True, timeout=30)


def roots_folder(folder: Path) -> dict[str, bytes]:
    """A folder of root's with files that must come out unchanged (profile.db: what a profile
    --out through a link deleted); returns them by name."""
    folder.mkdir()
    files = {"profile.db": b"IMPORTANT", "profile.db-wal": b"X", "keep.txt": b"root's"}
    for name, data in files.items():
        (folder / name).write_bytes(data)
        (folder / name).chmod(0o600)
    return files


def assert_folder_untouched(folder: Path, files: dict[str, bytes]) -> None:
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files


def mlcostd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon", *args], cwd=livedaemon.ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.fault(HOSTILE, "profile --out a symlinked folder another user planted in /tmp")
def test_profile_out_through_another_users_link_is_refused_and_its_target_kept(shared_tmp):
    """The probe: `ln -sfn /tmp/victim2 /tmp/out3` by the attacker, then root's `mlcostd
    profile --out /tmp/out3` deleted root's profile.db and -wal there and wrote its files."""
    kept = shared_tmp / "victim2"
    files = roots_folder(kept)
    link = shared_tmp / "out3"
    as_attacker("ln", "-sfn", str(kept), str(link))
    for out in (link, link / "sub"):  # the folder itself, or one above it
        done = mlcostd("profile", "--simulate", "--out", str(out), "--", "true")
        assert done.returncode == 2, done.stderr
        assert (f"{link}, which is a symbolic link" if out != link else
                f"{link} is a symbolic link") in done.stderr, done.stderr
        assert f"a symbolic link (to {kept}) owned by uid {ATTACKER}" in done.stderr
        assert f"remove the link {link}" in done.stderr and "--db" not in done.stderr
        assert "Traceback" not in done.stderr, done.stderr
    assert_folder_untouched(kept, files)


@pytest.mark.fault(HOSTILE, "profile --junit into another user's symlinked folder, or into "
                            "their 0777 folder")
def test_a_junit_folder_another_user_could_change_is_refused_before_the_run(shared_tmp,
                                                                           tmp_path):
    """--junit's folder had no owner or mode check: in the attacker's 0777 folder the JUnit
    file was written, and the attacker replaced it with a forged "all pass"."""
    kept = shared_tmp / "rootdir"
    files = roots_folder(kept)
    as_attacker("ln", "-sfn", str(kept), str(shared_tmp / "j"))
    as_attacker("mkdir", "-m", "777", str(shared_tmp / "open"))
    marker = tmp_path / "ran"
    for junit, said in ((shared_tmp / "j" / "gates.xml", f"owned by uid {ATTACKER}"),
                        (shared_tmp / "open" / "gates.xml",
                         "is writable by its group or by everyone (mode 777) without the "
                         "sticky bit")):
        done = mlcostd("profile", "--simulate", "--out", str(tmp_path / "out"), "--junit",
                       str(junit), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
        assert done.returncode == 2, done.stderr
        assert f"cannot use --junit {junit}: the --junit folder {junit.parent} " in done.stderr
        assert said in done.stderr, done.stderr
    assert not marker.exists()  # refused before the run
    assert_folder_untouched(kept, files)
    assert list((shared_tmp / "open").iterdir()) == []


@pytest.mark.fault(HOSTILE, "report --html, compare --html and snapshot --out into another "
                            "user's symlinked folder or 0777 folder")
def test_html_and_snapshot_outputs_in_a_folder_another_user_could_change_are_refused(
        shared_tmp, tmp_path):
    from daemon.sources.sample import GpuSample, Sample

    store = Store(str(tmp_path / "mlcost.db"))
    for i in range(10):  # a store with samples to report, snapshot and render
        store.write(Sample(ts=1_790_000_000.0 + i, tick=i + 1, gpus=(
            GpuSample(0, "GPU-0", "A100", utilization=50.0, memory_used_bytes=0,
                      memory_total_bytes=40 << 30),)))
    store.close()
    shutil.copyfile(tmp_path / "mlcost.db", tmp_path / "copy.db")
    profile = tmp_path / "p"
    profile.mkdir()
    (profile / "profile.json").write_text('{"window": {}, "processes": []}')
    shutil.copytree(profile, tmp_path / "q")
    kept = shared_tmp / "snap"
    files = roots_folder(kept)
    link = shared_tmp / "c"
    as_attacker("ln", "-sfn", str(kept), str(link))
    as_attacker("mkdir", "-m", "777", str(shared_tmp / "open"))
    for args in (["report", "--db", str(tmp_path / "mlcost.db"), "--html", f"{link}/rep.html"],
                 ["compare", str(profile), str(tmp_path / "q"), "--html", f"{link}/diff.html"],
                 ["snapshot", "--db", str(tmp_path / "mlcost.db"), "--since", "1h", "--until",
                  "1790000009", "--out", f"{link}/x.db"],
                 ["snapshot", "--db", str(tmp_path / "mlcost.db"), "--since", "1h", "--until",
                  "1790000009", "--out", f"{shared_tmp / 'open'}/"],
                 ["snapshot", "--render", str(tmp_path / "copy.db"), "--out",
                  f"{link}/r.html"]):
        done = mlcostd(*args)
        assert done.returncode != 0, (args, done.stdout, done.stderr)
        assert (f"owned by uid {ATTACKER}" in done.stderr
                or "(mode 777) without the sticky bit" in done.stderr), (args, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
    assert_folder_untouched(kept, files)
    assert list((shared_tmp / "open").iterdir()) == []


def test_folders_are_made_one_at_a_time_without_following_another_users_link(shared_tmp):
    """private_folder made the folders above with mkdir(parents=True), through any link, and
    used a link at the folder itself as the folder; root's own links still lead where they
    point, and a plain folder is made as before (0700)."""
    kept = shared_tmp / "kept"
    kept.mkdir()
    as_attacker("ln", "-s", str(kept), str(shared_tmp / "theirs"))
    for folder in (shared_tmp / "theirs", shared_tmp / "theirs" / "a" / "b"):
        with pytest.raises(RefusedFile, match=f"owned by uid {ATTACKER}"):
            private_folder(folder)
        assert folder_problem(folder) is not None
    assert list(kept.iterdir()) == []
    (shared_tmp / "mine").symlink_to(kept)  # root's own link: followed
    assert private_folder(shared_tmp / "mine" / "new") is True
    assert mode(kept / "new") == 0o700 and folder_problem(shared_tmp / "mine" / "new") is None
    assert private_folder(shared_tmp / "plain" / "deeper") is True
    assert mode(shared_tmp / "plain" / "deeper") == 0o700
    assert private_folder(shared_tmp / "plain" / "deeper") is False

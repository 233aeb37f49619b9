"""Every HTML output (`report --html`, `compare --html`, `snapshot --render` and `--html`,
profile.html) follows one rule (daemon.store.files.page_problem): it replaces only an earlier
page (a file that begins `<!doctype html`) or an empty file, never the store it is made from,
an SQLite database or any other file, never through a link; a refusal is one line and exit 2
before any work. `snapshot --render --out out/victim.db` wrote a page over a store, and
`report --html` over the store a daemon was recording into."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.runtime.snapshots import render_html_file
from daemon.store.files import RefusedFile
from daemon.store.snapshot import write_snapshot
from tests.daemon.scripted import T0, recording_daemon
from tests.livedaemon import ROOT


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, Path]:
    """(a store recorded through the daemon's tick path, a snapshot of it)."""
    folder = tmp_path_factory.mktemp("recorded")
    daemon = recording_daemon(folder, 5.0, ticks=20)
    assert daemon.store is not None
    daemon.store.close()
    snapshot = folder / "snap.db"
    write_snapshot(folder / "mlcost.db", snapshot, T0, T0 + 21)
    return folder / "mlcost.db", snapshot


def _mlcostd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.commands.cli", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          stdin=subprocess.DEVNULL)


def _copies(recorded: tuple[Path, Path], folder: Path) -> tuple[Path, Path]:
    store, snapshot = recorded
    return (Path(shutil.copyfile(store, folder / "copy.db")),
            Path(shutil.copyfile(snapshot, folder / "snap.db")))


def test_an_html_output_never_replaces_a_store_nor_a_file_that_is_not_a_page(recorded,
                                                                             tmp_path):
    copy, snap = _copies(recorded, tmp_path)
    victim = Path(shutil.copyfile(copy, tmp_path / "victim.db"))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    wal = tmp_path / "copy.db-wal"  # SQLite's file beside a store: not a page either
    wal.write_bytes(b"\x37\x7f\x06\x82" + bytes(28))
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    db_said = "is an SQLite database"
    for args, said in (
        (("snapshot", "--render", str(snap), "--out", str(victim)), db_said),
        (("snapshot", "--render", str(snap), "--out", str(snap)),
         "is the file the page is made from"),
        (("report", "--db", str(copy), "--html", str(copy)), "is the file the page is made from"),
        (("report", "--db", str(copy), "--html", str(victim)), db_said),
        (("report", "--db", str(copy), "--html", str(wal)), "is SQLite's -wal file of"),
        (("report", "--db", str(copy), "--html", str(notes)), "is not a page mlcost wrote"),
        (("compare", str(copy), str(snap), "--html", str(victim)), db_said),
        (("compare", str(copy), str(snap), "--html", str(notes)), "is not a page mlcost wrote"),
        (("snapshot", "--render", str(snap), "--out", str(notes)), "is not a page mlcost wrote"),
    ):
        done = _mlcostd(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stdout == "" and said in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # one line
        assert "Traceback" not in done.stderr
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before
    # the refusal names the file and a name to give instead
    refused = _mlcostd("report", "--db", str(copy), "--html", str(victim))
    assert f"--html {victim} is an SQLite database" in refused.stderr
    assert f"e.g. {tmp_path / 'victim.html'}" in refused.stderr


def test_a_page_mlcost_wrote_is_replaced_by_the_next_one(recorded, tmp_path):
    """A daily `report --html` from cron writes over yesterday's page; so does each writer over
    a page of another (all begin `<!doctype html`), and over an empty file (`mktemp`)."""
    copy, snap = _copies(recorded, tmp_path)
    page = tmp_path / "daily.html"
    for args in (("report", "--db", str(copy), "--html", str(page)),
                 ("report", "--db", str(copy), "--html", str(page)),
                 ("snapshot", "--render", str(snap), "--out", str(page)),
                 ("compare", str(copy), str(snap), "--html", str(page))):
        done = _mlcostd(*args)
        assert done.returncode == 0, (args, done.stderr)
        assert f"html: {page}" in done.stdout
        assert page.read_text()[:14].lower() == "<!doctype html"
        assert page.stat().st_mode & 0o777 == 0o600
    empty = tmp_path / "tmp.Xa12"
    empty.touch()
    done = _mlcostd("report", "--db", str(copy), "--html", str(empty))
    assert done.returncode == 0, done.stderr
    assert empty.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db", "daily.html", "snap.db",
                                                          "tmp.Xa12"]


def test_render_into_a_folder_writes_the_snapshots_page_there(recorded, tmp_path):
    """`--render FILE --out FOLDER` failed "cannot write out: out is a directory", while a
    snapshot's --out takes a folder."""
    _, snap = recorded
    folder = tmp_path / "pages"
    folder.mkdir()
    done = _mlcostd("snapshot", "--render", str(snap), "--out", f"{folder}/")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"html: {folder / 'snap.html'}\n"
    assert (folder / "snap.html").read_text().startswith("<!DOCTYPE html>")
    missing = tmp_path / "typo"
    done = _mlcostd("snapshot", "--render", str(snap), "--out", f"{missing}/")
    assert done.returncode == 2 and f"there is no folder {missing}" in done.stderr, done.stderr
    assert not missing.exists()


@pytest.mark.parametrize("aimed_at", ["a page", "a store"])
def test_a_link_planted_at_an_html_output_is_refused_never_followed(recorded, tmp_path,
                                                                     aimed_at):
    copy, snap = _copies(recorded, tmp_path)
    target = tmp_path / "target"
    if aimed_at == "a page":  # a link to a page: following it would still be writing elsewhere
        target.write_text("<!doctype html><p>someone's page</p>")
    else:
        shutil.copyfile(copy, target)
    kept = target.read_bytes()
    link = tmp_path / "out.html"
    link.symlink_to(target)
    for args in (("report", "--db", str(copy), "--html", str(link)),
                 ("compare", str(copy), str(snap), "--html", str(link)),
                 ("snapshot", "--render", str(snap), "--out", str(link))):
        done = _mlcostd(*args)
        assert done.returncode == 2 and f"{link} is a symbolic link" in done.stderr, \
            (args, done.stderr)
    assert link.is_symlink() and target.read_bytes() == kept


def test_the_page_writer_itself_refuses_a_store_whoever_calls_it(recorded, tmp_path):
    """profile.html and a snapshot's --html are written by render_html_file: the same rule,
    checked again at the write."""
    copy, snap = _copies(recorded, tmp_path)
    kept = copy.read_bytes()
    with pytest.raises(RefusedFile, match="is an SQLite database"):
        render_html_file(snap, copy)
    with pytest.raises(RefusedFile, match="is the file the page is made from"):
        render_html_file(snap, snap)
    assert copy.read_bytes() == kept
    render_html_file(snap, tmp_path / "profile.html")
    render_html_file(snap, tmp_path / "profile.html")  # a profile written again
    assert (tmp_path / "profile.html").read_text().startswith("<!DOCTYPE html>")

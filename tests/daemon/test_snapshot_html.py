"""The HTML report of a snapshot, rendered by headless Chromium: it loads with no console
error and no request beyond itself, its charts hold the series and points the store has, and a
hostile command line is shown as text, never run."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from daemon import clock
from daemon.report_html import collect, render_store
from daemon.runtime import snapshots
from daemon.runtime.snapshots import give_back_freed_memory, render_html_apart, render_html_file
from daemon.store import facts
from daemon.store.snapshot import SnapshotError, write_snapshot
from tests import chromium
from tests.daemon.scripted import T0, recording_daemon
from tests.livedaemon import ROOT

HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">"&\''


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("html")
    daemon = recording_daemon(folder, 5.0, ticks=30)
    store = daemon.store
    assert store is not None
    facts.write_stacks(store, [facts.StackRow(
        ts=T0 + 12, pid=4242, start_time=1000.5, thread_id=1, stack_hash="s1",
        frames=(("read_shard", "/srv/<train>.py", 88),), phase="data_wait", gpu_util=2.0)])
    facts.write_event(store, {"kind": "low_utilization", "target": "4242:1000.500",
                              "started_at": T0 + 10, "ended_at": T0 + 16, "cost_so_far": 0.01})
    facts.write_event(store, {"kind": "recommendation_resolved", "target": "4242:1000.500",
                              "started_at": T0 + 3, "ended_at": T0 + 9, "cost_so_far": None})
    facts.write_event(store, {"kind": "gpu_held_idle", "target": "gpu:0",
                              "started_at": T0 + 5, "ended_at": None, "cost_so_far": 0.2})
    facts.write_recommendations(store, [{
        "id": "r1", "rule": "dataloader_starvation", "target": "4242:1000.500",
        "summary": f"raise num_workers for {HOSTILE}", "savings_per_month": 812.0,
        "method": "data-wait share x GPU price", "evidence": {
            "data_wait_share": 0.4, "top_stack": "/srv/train.py:88",
            "window": {"start": T0 + 0.123456789, "end": T0 + 30.987654321,
                       "seconds": 30.864197532},
            "process": {"burn_per_hour": 4.096574074074074, "gpus": [0]},
            "gpus": [{"index": 0, "memory_peak_bytes": 32212254720,
                      "utilization_p95": 97.33333333333333}]}}],
        T0 + 25)
    store.close()
    conn = sqlite3.connect(folder / "mlcost.db")
    conn.execute("UPDATE processes SET command = ?", (f"python {HOSTILE}",))
    conn.commit()
    conn.close()
    out = folder / "snap.db"
    write_snapshot(folder / "mlcost.db", out, T0, T0 + 31,
                   trigger={"kind": "gpu_held_idle", "reason": f"test {HOSTILE}", "at": T0 + 20})
    return out


def test_the_report_renders_in_chromium_with_its_charts_and_nothing_else(snapshot, tmp_path):
    html = tmp_path / "report.html"
    render_html_file(snapshot, html)
    assert html.stat().st_mode & 0o777 == 0o600
    data = collect(snapshot)
    shot = tmp_path / "report.png"
    page = chromium.load(html.as_uri(), chromium.CHARTS_SCRIPT, screenshot=shot)
    assert page.console_errors == []
    assert page.requests == [html.as_uri()]  # no font, script, image or favicon fetched
    charts = {c["chart"]: c for c in page.value}
    assert set(charts) == {"burn", "gpu-utilization", "gpu-memory", "windows"}
    from daemon.report_html.render import BURN_SERIES

    expected = {"burn": {BURN_SERIES.get(k, k): v for k, v in data.burn.items()},
                "gpu-utilization": {f"GPU {i}": p for i, p in data.gpu_utilization.items()},
                "gpu-memory": {f"GPU {i}": p for i, p in data.gpu_memory.items()}}
    for name, series in expected.items():
        chart = charts[name]
        assert chart["declared"] == len(series) == len(chart["series"]), name
        for drawn in chart["series"]:
            points = len(series[drawn["name"]])
            assert points >= 25, (name, drawn)  # ~one point per recorded tick
            assert drawn["declared"] == drawn["drawn"] == points, (name, drawn)
    assert [s["drawn"] for s in charts["windows"]["series"]] == [1]  # one window, one bar
    assert len(data.burn) == 3 and len(data.gpu_utilization) == 2
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_a_hostile_command_line_is_text_in_the_report(snapshot, tmp_path):
    html = tmp_path / "hostile.html"
    html.write_text(render_store(snapshot))
    text = html.read_text()
    assert "<script>" not in text and "<img" not in text
    page = chromium.load(html.as_uri(), "({scripts: document.scripts.length, "
                                        "images: document.images.length, pwned: window.pwned "
                                        "|| 0, text: document.body.innerText})")
    assert page.console_errors == []
    assert page.value["scripts"] == 0 and page.value["images"] == 0 and page.value["pwned"] == 0
    assert "python <script>window.pwned=1</script>" in page.value["text"]  # shown as typed
    assert "/srv/<train>.py:88" in page.value["text"]  # the top stack's file:line
    assert "$812/month" in page.value["text"] and "data-wait share x GPU price" in \
        page.value["text"]
    assert "Taken because: test <script>" in page.value["text"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.commands.cli", "snapshot", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          stdin=subprocess.DEVNULL)


def test_render_writes_the_html_of_a_file_and_refuses_what_is_not_one(snapshot, tmp_path):
    out = tmp_path / "r.html"
    done = _cli("--render", str(snapshot), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"html: {out}"
    assert out.read_text().startswith("<!DOCTYPE html>") and out.stat().st_mode & 0o777 == 0o600
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite\n" * 100)
    for bad in (junk, tmp_path / "missing.db"):
        refused = _cli("--render", str(bad))
        assert refused.returncode == 2 and str(bad) in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr


def test_snapshot_command_errors_say_what_to_fix(tmp_path):
    sock = str(tmp_path / "none.sock")
    for args, code, words in (
        (("--since", "soon"), 2, "--since 'soon' is not a duration"),
        (("--since", "0"), 2, "must be longer than 0 s (at least 1 s); give a duration (ASCII "
                              "digits and a unit"),
        (("--until", "2031-01-01"), 2, "--until '2031-01-01' is in the future; give a past "
                                       "time: Unix seconds or an ISO 8601 time"),
        (("--since", "8d"), 2, "--since '8d' is longer than a snapshot covers (at most 7d"),
        (("--out", str(tmp_path / "typo" / "dir" / "x.db")), 2, "there is no folder"),
        (("--until", "yesterday-ish"), 2, "--until 'yesterday-ish' is not a time"),
        (("--upload", "http://x/y"), 2, "--upload takes no target"),  # the config says where
        ((), 2, "no store at"),
    ):
        done = _cli("--db", str(tmp_path / "nothing.db"), "--socket", sock, *args)
        assert done.returncode == code and words in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_report_uses_a_wide_window_names_processes_and_rounds_its_evidence(snapshot,
                                                                               tmp_path):
    """Issue 25: at 1400 px the page used about 650 px; the timeline labelled its rows
    '13029:1796159472.170'; evidence was raw JSON with 16-digit floats."""
    html = tmp_path / "wide.html"
    html.write_text(render_store(snapshot))
    script = """(() => {
      const right = Math.max(...[...document.querySelectorAll('svg.chart, table')]
        .map(e => e.getBoundingClientRect().right));
      const rows = [...document.querySelectorAll('svg[data-chart=windows] > text')]
        .filter(t => t.getAttribute('x') === '4').map(t => t.firstChild.textContent);
      const evidence = [...document.querySelectorAll('td.evidence')].map(e => e.innerText);
      const targets = [...document.querySelectorAll('h2')].filter(h => h.innerText === 'Events')
        .map(h => h.nextElementSibling.innerText);
      return {right, width: window.innerWidth, rows, evidence, targets};
    })()"""
    shot = tmp_path / "wide.png"
    page = chromium.load(html.as_uri(), script, screenshot=shot, size=(1400, 1000))
    assert page.console_errors == []
    value = page.value
    assert value["right"] >= 0.9 * value["width"], value  # the width is used
    [row] = value["rows"]
    assert row.startswith("4242 ") and "1000.500" not in row and "<script>" not in row
    [evidence] = value["evidence"]
    assert not re.search(r"\d\.\d{5,}", evidence), evidence  # no 16-digit floats
    assert "$4.10" in evidence and "97.3" in evidence and "30.0 GiB" in evidence
    assert "40%" in evidence  # a share as a percent
    assert clock.local_time(T0 + 0.123456789) in evidence  # a time as a clock time
    assert "{" not in evidence  # a list, not JSON
    [events] = value["targets"]
    assert "recommendation_resolved\t4242 " in events and "1000.500" not in events


def test_small_dollar_amounts_keep_their_figures_and_a_title_can_say_profile(snapshot):
    """A 10-second profile spends $0.0022: the header said $0.00. The page of a profile says
    it is one (it said 'snapshot')."""
    from daemon.report_html import render

    data = collect(snapshot)
    data.spend, data.wasted = 0.0022, 0.000123
    page = render(data)
    assert "spent <b>$0.0022</b>, of which wasted <b>$0.00012</b>" in page
    data.spend = 1234.5
    assert "spent <b>$1,234.50</b>" in render(data)
    titled = render_store(snapshot, title="mlcost profile of python <train>.py")
    assert "<title>mlcost profile of python &lt;train&gt;.py</title>" in titled
    assert "snapshot of" not in titled.split("</h1>")[0]


def test_a_page_over_a_range_shows_the_costs_the_report_gives_over_it(snapshot, tmp_path):
    """A 40-step profile's page said $0.0037 spent in its header and $0.0036 for the command's
    process, where the profile said $0.0035: the page was rendered over its store's ticks, the
    first taken before the command started, and profile.json over the run. Over the run's
    range the process costs what the report says, and the header says the host spent what
    the report's `spend` says (the host's, not the command's)."""
    from daemon.commands import report
    from daemon.report_html.render import _money
    from daemon.store.reader import StoreReader

    since, until = T0 + 6.5, T0 + 31
    html = tmp_path / "run.html"
    render_html_file(snapshot, html, title="mlcost profile of python train.py",
                     since=since, until=until)
    reader = StoreReader(str(snapshot))
    try:
        document = report.build(reader, until - since, until=until)
    finally:
        reader.close()
    process = next(p for p in document["processes"] if p["pid"] == 4242)

    def shown(page: str) -> tuple[str, str]:  # (the header's spend, the process row's cost)
        spent = re.search(r"the host spent <b>([^<]*)</b>", page)
        row = re.search(r'<td class="num"[^>]*>4242</td>(.*?)</tr>', page, re.S)
        assert spent and row, page
        return spent[1], re.findall(r'<td class="num"[^>]*>([^<]*)</td>', row[1])[-1]

    assert shown(html.read_text()) == (_money(document["spend"]["total"]),
                                       _money(process["cost"], 4))
    whole = tmp_path / "whole.html"
    render_html_file(snapshot, whole)  # the snapshot's own range: more than the run
    assert shown(whole.read_text())[1] != _money(process["cost"], 4)


def test_a_chart_of_a_run_under_a_second_writes_its_time_once(tmp_path):
    """A run of no length (one tick: since == until) wrote its five time labels at one
    place, one over another; one of under a second wrote the same second five times. A label
    that reads as the one before is left out; a longer range keeps its five."""
    from daemon.report_html.render import CSS, line_chart, timeline

    def labels(svg: str) -> list[tuple[str, str]]:  # (x, text) of the time axis
        return re.findall(r'<text x="([0-9.]+)" y="[0-9.]+" text-anchor="[a-z]+">'
                          r"(\d\d:\d\d:\d\d)</text>", svg)

    t = float(int(T0)) + 0.2
    window = [{"target": "1:2.000", "started_at": t, "ended_at": t, "label": "1 train.py"}]
    for until in (t, t + 0.5):
        for svg in (line_chart("burn", {"burn $/h": [(t, 1.0)]}, t, until, "$"),
                    timeline(window, t, until)):
            assert labels(svg) == [labels(svg)[0]] and labels(svg)[0][1] == clock.local_time(
                t, date=False), labels(svg)
    longer = labels(line_chart("burn", {"burn $/h": [(t, 1.0)]}, t, t + 20, "$"))
    assert len(longer) == 5 and len({x for x, _ in longer}) == 5
    page = tmp_path / "zero.html"
    page.write_text(f"<!doctype html><style>{CSS}</style>"
                    + line_chart("burn", {"burn $/h": [(t, 1.0)]}, t, t, "$"))
    shown = chromium.load(page.as_uri(), "[...document.querySelectorAll('svg text')]"
                          ".filter(e => /:/.test(e.textContent)).length", size=(700, 400))
    assert shown.value == 1


def test_a_phase_balance_read_from_proc_alone_says_its_low_confidence(tmp_path):
    """Without Python stacks (ptrace denied) the phases come from /proc: the page says so next
    to the bar, as the text report and mlcost-top do; stacks from py-spy say nothing."""
    from daemon.analysis.phase_balance import NO_STACK_FILE

    daemon = recording_daemon(tmp_path, 5.0, ticks=30)
    store = daemon.store
    assert store is not None
    facts.write_stacks(store, [facts.StackRow(
        ts=T0 + t, pid=4242, start_time=1000.5, thread_id=1, stack_hash="p1",
        frames=(("D state (disk wait)", NO_STACK_FILE, 0),), phase="data_wait", gpu_util=2.0)
        for t in (10, 12, 14)])
    facts.write_event(store, {"kind": "low_utilization", "target": "4242:1000.500",
                              "started_at": T0 + 10, "ended_at": T0 + 16, "cost_so_far": 0.01})
    store.close()
    page = render_store(tmp_path / "mlcost.db")
    assert 'data-confidence="low"' in page and "low confidence, from /proc" in page

    stacked = tmp_path / "stacked"
    stacked.mkdir()
    daemon = recording_daemon(stacked, 5.0, ticks=30)
    assert daemon.store is not None
    facts.write_stacks(daemon.store, [facts.StackRow(
        ts=T0 + t, pid=4242, start_time=1000.5, thread_id=1, stack_hash="s1",
        frames=(("read_shard", "/srv/train.py", 88),), phase="data_wait", gpu_util=2.0)
        for t in (10, 12, 14)])
    facts.write_event(daemon.store, {"kind": "low_utilization", "target": "4242:1000.500",
                                     "started_at": T0 + 10, "ended_at": T0 + 16,
                                     "cost_so_far": 0.01})
    daemon.store.close()
    page = render_store(stacked / "mlcost.db")
    assert "data-phase=\"data_wait\"" in page and 'data-confidence="low"' not in page


def test_the_report_built_apart_from_the_daemon_is_the_same_page(snapshot, tmp_path):
    """Inside the daemon the report is built in a child Python (what it reads would otherwise
    stay in the daemon's memory): the same page, written 0600."""
    here, apart = tmp_path / "here.html", tmp_path / "apart.html"
    render_html_file(snapshot, here)
    render_html_apart(snapshot, apart)
    assert apart.stat().st_mode & 0o777 == 0o600
    # the page says when it was built; the rest is the same
    stamp = re.compile(rb"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d)?[^<\"]*")
    assert stamp.sub(b"", apart.read_bytes()) == stamp.sub(b"", here.read_bytes())


def test_the_child_does_not_import_from_the_folder_it_was_started_in(snapshot, tmp_path,
                                                                   monkeypatch):
    """The report's child Python runs isolated: a `daemon` package planted in the folder a root
    daemon was started from (or named by PYTHONPATH) is never imported; relative paths still
    mean the caller's folder."""
    planted = tmp_path / "planted" / "daemon"
    planted.mkdir(parents=True)
    marker = tmp_path / "imported"
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path / "planted")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "planted"))
    (tmp_path / "planted" / "snap.db").write_bytes(snapshot.read_bytes())
    render_html_apart(Path("snap.db"), Path("report.html"))
    assert (tmp_path / "planted" / "report.html").read_bytes().startswith(b"<!")
    assert not marker.exists()


def test_a_report_the_child_cannot_build_fails_with_its_reason(tmp_path):
    not_a_store = tmp_path / "notes.db"
    not_a_store.write_text("not a database\n" * 100)
    html = tmp_path / "report.html"
    with pytest.raises(SnapshotError) as raised:
        render_html_apart(not_a_store, html)
    message = str(raised.value)
    assert str(html) in message and "\n" not in message
    assert not html.exists()


def test_memory_is_given_back_after_a_snapshot_even_without_glibc(monkeypatch):
    give_back_freed_memory()  # glibc here: trims
    monkeypatch.setattr(snapshots, "_malloc_trim", lambda: None)
    give_back_freed_memory()  # no C library to ask: nothing happens


def test_the_child_finds_what_the_daemon_imported_through_its_pythonpath(snapshot, tmp_path):
    """A daemon whose libraries come through PYTHONPATH (a source checkout, a --target folder:
    scripts/gpu-check on a GPU host) builds its incident snapshots' pages too: the isolated
    child once lost that path and failed with "No module named 'sqlite_utils'". The folder
    the daemon was started from (`python -m`) is still not searched: a `daemon` package
    planted there after the start is not imported."""
    import site

    folder = tmp_path / "started-here"
    folder.mkdir()
    marker = tmp_path / "imported"
    planted = f"open({str(marker)!r}, 'w').close()\n"
    (folder / "render_it.py").write_text(
        "import sys\nfrom pathlib import Path\n"
        "from daemon.runtime.snapshots import render_html_apart\n"
        "Path('daemon').mkdir()\n"
        f"Path('daemon', '__init__.py').write_text({planted!r})\n"
        "render_html_apart(Path(sys.argv[1]), Path(sys.argv[2]))\n")
    base = getattr(sys, "_base_executable", sys.executable)  # the interpreter without the venv
    html = tmp_path / "report.html"
    done = subprocess.run(
        [base, "-m", "render_it", str(snapshot), str(html)], cwd=folder,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([*site.getsitepackages(), str(ROOT)])),
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert html.read_bytes().startswith(b"<!")
    assert (folder / "daemon" / "__init__.py").exists() and not marker.exists()


def test_a_snapshot_never_replaces_a_file(tmp_path):
    """`--out /etc/passwd` (as root) wrote a store over it; `--out` at the daemon's own store
    replaced the store; `--out x.html --html` wrote the report over its own snapshot; and
    `--out missing/` made a file named `missing`. Each is refused before anything is read or
    written, whichever path (daemon or store) would take the snapshot, with its reason (probe
    126 F12: the report beside `--out x.db` was named as if `--out` had said it, and a link to
    a folder was called no folder)."""
    precious = tmp_path / "passwd"
    precious.write_text("root:x:0:0:root:/root:/bin/bash\n")
    beside = tmp_path / "s.html"
    beside.write_text("<p>an earlier report</p>")
    sock = str(tmp_path / "none.sock")
    link = tmp_path / "dirlink"
    link.symlink_to("/")
    for args, words in (
        (("--out", str(precious)), f"{precious} exists; a snapshot never replaces a file"),
        (("--out", str(tmp_path / "s.db"), "--html"),
         f"--out {tmp_path / 's.db'}: the report beside it, {beside}, exists"),
        (("--out", str(tmp_path / "same.html"), "--html"),
         "the report is written beside the snapshot, as FILE.html; name the snapshot FILE.db"),
        (("--out", str(tmp_path / "missing") + "/"), "there is no folder"),
        (("--out", str(link) + "/"), f"{link} is a symbolic link (to /), not a folder"),
    ):
        done = _cli("--db", str(tmp_path / "nothing.db"), "--socket", sock, "--since", "1m",
                    *args)
        assert done.returncode == 2 and words in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and done.stdout == ""
    assert precious.read_text() == "root:x:0:0:root:/root:/bin/bash\n"
    assert beside.read_text() == "<p>an earlier report</p>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dirlink", "passwd", "s.html"]


def test_evidence_writes_identifiers_plain_and_a_spot_prices_range_in_dollars():
    """Probe 84: the page read `pid: 12,077` (no pid has a thousands separator) and a spot
    price's `high: 9.61`, `low: 5.09` without the dollar sign its per_hour had. Counts keep
    their separators."""
    import importlib

    page = importlib.import_module("daemon.report_html.render")
    html = page._evidence({
        "pid": 12077, "port": 18080, "tick": 123456, "samples": 12345,
        "gpus": [{"index": 0, "memory_peak_bytes": 0}],
        "spot": {"per_hour": 7.35, "low": 5.09, "high": 9.61, "source": "catalog"}})
    assert "pid</span>: 12077<" in html and "port</span>: 18080<" in html
    assert "tick</span>: 123456<" in html
    assert "samples</span>: 12,345<" in html  # a count may have one
    assert "per hour</span>: $7.35<" in html
    assert "low</span>: $5.09<" in html and "high</span>: $9.61<" in html
    # a low and high that are no price's (beside no per_hour) are not dollars
    assert "$" not in page._evidence({"low": 5.09, "high": 9.61})


def test_a_timeline_row_names_a_long_module_by_its_last_part_never_cut_mid_name():
    """Probe 84: rows read `12077 ….sim.workloads.checkpoint_heavy`, the module cut from the
    left mid-name. A long name is the command as mlcost-top shortens it, to its module or
    script; arguments are no part of a row's name."""
    from daemon.report_html.data import LABEL_CHARS, process_label

    def label(command: str) -> str:
        return process_label("12077:1.0", {"12077:1.0": (12077, command)})

    assert label("/venv/bin/python -m daemon.sim.workloads.checkpoint_heavy") == \
        "12077 python -m …checkpoint_heavy"
    assert label("python3 -m daemon.sim.workloads.inference_server --port 8080") == \
        "12077 python3 -m …inference_server"
    assert label("torchrun --nproc 8 /srv/train.py --lr 3") == "12077 train.py"
    long_script = label("python /srv/" + "x" * 60 + ".py --lr 3")
    assert long_script.startswith("12077 xxx") and len(long_script) <= len("12077 ") + LABEL_CHARS
    assert label("python -m a\x1b[31m.b") == "12077 a\\x1b[31m.b"


def test_an_event_open_at_a_snapshots_end_is_said_to_be_so_not_stopped_with_the_recording(
        snapshot):
    """Probe 126 F12: a snapshot's report said an event open at its end was "open when the
    recording stopped", though the recorder never stopped (the snapshot's range ended), and
    its page said "ongoing". Both say it was open at the end of the snapshot; the store the
    snapshot was taken from, which no daemon records into now, still says its recording
    stopped with the event open."""
    done = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(snapshot),
                           "--since", "1d"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if "gpu_held_idle gpu:0" in x)
    assert "(open at the end of this snapshot, " in line, line
    assert "recording stopped" not in line
    page = render_store(snapshot)
    assert "open at the end of this snapshot" in page and ">ongoing<" not in page
    done = subprocess.run([sys.executable, "-m", "daemon", "report", "--db",
                           str(snapshot.parent / "mlcost.db"), "--since", "1d"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if "gpu_held_idle gpu:0" in x)
    assert "(open when the recording stopped at " in line, line


NARROW_SCRIPT = """(() => {
  const cells = [...document.querySelectorAll('td code')];
  return {scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
          tallest: Math.max(...cells.map(c => c.getBoundingClientRect().height)),
          line: parseFloat(getComputedStyle(cells[0]).lineHeight) || 15};
})()"""


def test_on_a_narrow_screen_a_long_command_keeps_a_readable_width(tmp_path):
    """Probe 126 F12: at 600 px the process table squeezed a long command line into a column a
    word wide, ~25 lines tall. Each table scrolls sideways in its own box now: the page keeps
    the screen's width and the command a few lines."""
    daemon = recording_daemon(tmp_path, 5.0, ticks=10)
    assert daemon.store is not None
    daemon.store.close()
    long = ("/opt/conda/envs/train/bin/python -m torch.distributed.run --nproc_per_node 8 "
            "/srv/jobs/llama/finetune_with_a_long_script_name.py --config /srv/jobs/llama/"
            "configs/a_very_long_configuration_file_name.yaml --output-dir /mnt/ckpt/run-1")
    conn = sqlite3.connect(tmp_path / "mlcost.db")
    conn.execute("UPDATE processes SET command = ?", (long,))
    conn.commit()
    conn.close()
    html = tmp_path / "narrow.html"
    render_html_file(tmp_path / "mlcost.db", html)
    page = chromium.load(html.as_uri(), NARROW_SCRIPT, size=(600, 2400))
    assert page.console_errors == []
    found = page.value
    assert found["scroll"] <= found["inner"], found  # no page-wide sideways scroll
    assert found["tallest"] <= 8 * found["line"], found  # was ~23 lines


# Per table box: how much wider its table is than the box (a sideways scrollbar), where its
# `samples` and `snapshot` columns end, and whether the page itself scrolls sideways.
FIT_SCRIPT = """(() => {
  const boxes = [...document.querySelectorAll('div.table')].map(box => {
    const heads = [...box.querySelectorAll('th')].map(th => th.textContent);
    const right = name => { const th = [...box.querySelectorAll('th')].find(
      h => h.textContent === name); return th ? th.getBoundingClientRect().right : null; };
    return {heads: heads.join(','), over: box.scrollWidth - box.clientWidth,
            box_right: box.getBoundingClientRect().right,
            samples_right: right('samples'), snapshot_right: right('snapshot')};
  });
  return {boxes, inner: window.innerWidth, page: document.documentElement.scrollWidth,
          summary_over: [...document.querySelectorAll('.summary')].map(
            s => s.scrollWidth - s.clientWidth)};
})()"""


def test_at_1200_px_long_stack_frames_and_paths_wrap_inside_their_tables(tmp_path):
    """Probe 141 L9: at 1200 px the Top stacks table's `samples` column was behind a sideways
    scrollbar and the Events table's `snapshot` column overflowed, on a snapshot's page and a
    profile's: each code cell kept 16em, three of them wider than a half-page column. Long
    frames, paths and commands wrap (or are cut with `…`, the whole text in the cell's title)
    inside their table; every table fits its box, both pages, at 1200 px and at the narrowest
    width that still puts two tables side by side."""
    daemon = recording_daemon(tmp_path, 5.0, ticks=30)
    store = daemon.store
    assert store is not None
    deep = "/home/researcher/projects/large-language-model-finetuning/src/training/data/"
    facts.write_stacks(store, [facts.StackRow(
        ts=T0 + 12 + i, pid=4242, start_time=1000.5, thread_id=1, stack_hash=f"s{i}",
        frames=((f"ShardedStreamingDatasetWithPrefetch.read_next_shard_from_remote_{i}",
                 f"{deep}streaming_dataset_with_a_rather_long_module_name_{i}.py", 1234),),
        phase="data_wait", gpu_util=2.0) for i in range(4)])
    facts.write_event(store, {"kind": "low_utilization", "target": "4242:1000.500",
                              "started_at": T0 + 10, "ended_at": T0 + 20, "cost_so_far": 0.01})
    snapshot_path = ("/var/lib/mlcost/snapshots/mlcost-a-host-with-a-long-name-2026-12-06T110828Z"
                     "-gpu_held_idle-gpu_3-and-more.db")
    for i, kind in enumerate(("recommendation_resolved", "gpu_held_idle", "gpu_unheld_idle")):
        facts.write_event(store, {"kind": kind, "target": f"gpu:{i}", "started_at": T0 + 2 + i,
                                  "ended_at": None, "cost_so_far": 0.9069})
        facts.write_event_snapshot(store, kind, f"gpu:{i}", T0 + 2 + i, snapshot_path)
    store.close()
    conn = sqlite3.connect(tmp_path / "mlcost.db")
    conn.execute("UPDATE processes SET command = ?", (
        "/home/researcher/.venv/bin/python3 -m training.launch_distributed_finetune "
        "--config-file " + deep + "configs/a_very_long_configuration_file_name.yaml",))
    conn.commit()
    conn.close()
    pages = {"snapshot": tmp_path / "snapshot.html", "profile": tmp_path / "profile.html"}
    render_html_file(tmp_path / "mlcost.db", pages["snapshot"])
    render_html_file(tmp_path / "mlcost.db", pages["profile"],
                     title="mlcost profile of python " + deep + "train.py --steps 120",
                     summary=["mlcostd profile: done (no gates)", "recommendation: prefetch its "
                              "input in parallel — " + deep + "x" * 120 + ".py:38"])
    for name, html in pages.items():
        for width in (1200, 1120):
            shot = tmp_path / f"{name}-{width}.png"
            page = chromium.load(html.as_uri(), FIT_SCRIPT, screenshot=shot, size=(width, 2000))
            assert page.console_errors == []
            found = page.value
            assert found["page"] <= found["inner"], (name, width, found)
            assert found["summary_over"] in ([], [0]), (name, width, found)
            stacks = next(b for b in found["boxes"] if b["heads"].startswith("where,"))
            events = next(b for b in found["boxes"] if b["heads"].startswith("event,"))
            for box in found["boxes"]:
                assert box["over"] <= 0, (name, width, box)  # no table wider than its box
            assert stacks["samples_right"] <= stacks["box_right"] <= found["inner"], stacks
            assert events["snapshot_right"] <= events["box_right"] <= found["inner"], events


def _top_stacks(page: str) -> list[list[str]]:
    """The rows of the page's Top stacks table, each its cells' text."""
    table = page.split("<h2>Top stacks</h2>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    return [[re.sub(r"<[^>]+>", "", cell).strip()
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)] for row in rows
            if "<td" in row]


def test_top_stacks_give_a_row_per_phase_of_one_line_as_the_report_does(tmp_path):
    """Probe 150 F8: one line sampled in two phases (profile.json: 61 host_preprocess and 1
    unknown) was one row of the page's Top stacks, "host_preprocess 62". A row per process,
    phase and stack, each with its own count."""
    daemon = recording_daemon(tmp_path, 5.0, ticks=30)
    store = daemon.store
    assert store is not None
    frames = (("decode", "/srv/train_cpu.py", 12),)
    facts.write_stacks(store, [facts.StackRow(
        ts=T0 + 10 + t / 2, pid=4242, start_time=1000.5, thread_id=1, stack_hash="s1",
        frames=frames, phase="host_preprocess" if t else "unknown", gpu_util=2.0)
        for t in range(7)])
    facts.write_event(store, {"kind": "low_utilization", "target": "4242:1000.500",
                              "started_at": T0 + 9, "ended_at": T0 + 16, "cost_so_far": 0.01})
    store.close()
    rows = _top_stacks(render_store(tmp_path / "mlcost.db"))
    assert [row[:4] for row in rows] == [
        ["/srv/train_cpu.py:12", "decode", "host_preprocess", "6"],
        ["/srv/train_cpu.py:12", "decode", "unknown", "1"]], rows


def test_an_event_open_at_a_snapshots_end_is_costed_to_its_end(tmp_path):
    """Probe 151 F9: an event open at a snapshot's end was costed as of the last rule
    evaluation that wrote it (its page 9 s short of the end, $4.10/h). Its cost is moved at
    its price per hour from the tick it reached (`cost_at`) to the range's end: up to the
    snapshot's end, in its page and its report alike, and back to the end of a range of the
    live store that ends before the event did. An event written without `cost_at` (a store
    from before it) is shown as stored."""
    from daemon.commands import report
    from daemon.store.reader import StoreReader

    daemon = recording_daemon(tmp_path, 5.0, ticks=30)
    store = daemon.store
    assert store is not None
    # $3.60/h from T0 + 5, written at T0 + 20 (15 s: $0.015)
    facts.write_event(store, {"kind": "gpu_unheld_idle", "target": "gpu:9",
                              "started_at": T0 + 5, "ended_at": None, "cost_so_far": 0.015,
                              "detail": {"gpu": 9, "price_per_hour": 3.6, "cost_at": T0 + 20}})
    facts.write_event(store, {"kind": "gpu_unheld_idle", "target": "gpu:8",
                              "started_at": T0 + 5, "ended_at": None, "cost_so_far": 0.015,
                              "detail": {"gpu": 8, "price_per_hour": 3.6}})
    store.close()

    def costs(db: Path, until: float) -> dict[str, float]:
        reader = StoreReader(str(db))
        try:
            doc = report.build(reader, until - T0, until=until)
        finally:
            reader.close()
        return {e["target"]: e["cost_so_far"] for e in doc["events"]
                if e["target"] in ("gpu:8", "gpu:9")}

    # to the snapshot's end: its last tick, T0 + 30 (its range reaches a second past it)
    out = tmp_path / "snap.db"
    write_snapshot(tmp_path / "mlcost.db", out, T0, T0 + 31, trigger={"kind": "manual"})
    assert costs(out, T0 + 31) == pytest.approx({"gpu:9": 0.025, "gpu:8": 0.015}, rel=1e-3)
    page = render_store(out)
    assert "$0.0250" in page and "$0.0150" in page, re.findall(r"\$0\.0\d+", page)
    # a report that ends long after the recording stopped: to its last tick, no further
    assert costs(tmp_path / "mlcost.db", T0 + 3600) == pytest.approx(
        {"gpu:9": 0.025, "gpu:8": 0.015}, rel=1e-3)
    # a range of the live store that ended before the event's cost was written
    assert costs(tmp_path / "mlcost.db", T0 + 15) == pytest.approx(
        {"gpu:9": 0.010, "gpu:8": 0.015}, rel=1e-3)


def _idle_host_store(folder: Path) -> Path:
    """A store whose two recommendations (the host idle, its process holding GPU 0 idle) each
    claim about the host's whole bill on their own, re-evaluated after T0 + 15 with a longer
    idle and a larger figure (as the live daemon does every round)."""
    daemon = recording_daemon(folder, 5.0, ticks=30)
    store = daemon.store
    assert store is not None
    bill = 4.0 * 730  # the test host's $4/h a month (pricing.offer.HOURS_PER_MONTH)

    def recs(minutes: int, share: float, end: float) -> list[dict[str, object]]:
        return [{"id": "host_idle host", "rule": "host_idle", "target": "host",
                 "summary": f"the whole host has been idle for at least {minutes} min: stop it",
                 "savings_per_month": share * bill, "method": "the host's price",
                 "evidence": {"window": {"start": T0 + 1, "end": end}}, "gpus": [0, 1]},
                {"id": "idle_gpu_held 4242:1000.500", "rule": "idle_gpu_held",
                 "target": "4242:1000.500",
                 "summary": f"pid 4242 holds GPU 0 idle for at least {minutes} min",
                 "savings_per_month": bill / 2, "method": "its GPU's price",
                 "evidence": {"window": {"start": T0 + 1, "end": end}}, "gpus": [0]}]

    facts.write_recommendations(store, recs(5, 0.97, T0 + 10), T0 + 10)
    facts.write_recommendations(store, recs(12, 0.99, T0 + 29), T0 + 29)
    store.close()
    return folder / "mlcost.db"


def test_a_snapshot_page_shows_the_recommendations_as_they_stood_at_its_ranges_end(tmp_path):
    """Probe 157 H1: a snapshot of a past range (`snapshot --until <past>`) showed on its page
    each recommendation as the store held it when the snapshot was taken: "idle for at least
    12 min" on a 4-min range, $728/month, evidence ending 7 minutes past the range, where
    `report --db` of the same file said "at least 5 min" and $719. The page reads them as the
    report does (daemon.analysis.recommendations_at): the same texts and dollars."""
    from daemon.commands import report
    from daemon.store.reader import StoreReader

    db = _idle_host_store(tmp_path)
    out = tmp_path / "past.db"
    write_snapshot(db, out, T0, T0 + 15)
    page = render_store(out)
    assert "at least 5 min" in page and "at least 12 min" not in page
    data = collect(out)
    reader = StoreReader(str(out))
    try:
        document = report.build(reader, data.until - data.since, until=data.until)
    finally:
        reader.close()
    said = {r["id"]: (r["summary"], r["savings_per_month"], r["evidence"]["window"]["end"])
            for r in document["recommendations"]}
    assert {r["id"]: (r["summary"], r["savings_per_month"], r["evidence"]["window"]["end"])
            for r in data.recommendations} == said
    assert all(end <= data.until for _, _, end in said.values()), said
    # a range on the live store too: the page of its first 15 s, as `report --until` reads it
    early = collect(db, T0, T0 + 15)
    assert [r["summary"] for r in early.recommendations] == [
        r["summary"] for r in data.recommendations]


def test_a_page_says_the_combined_savings_beside_the_bill_as_the_report_does(tmp_path):
    """Probe 157 M1: both pages listed each recommendation's standalone savings, two rows that
    added up to twice the host's bill, with no combined figure and no bill, where the text
    said "potential savings $734/month combined (the host's bill: $734/month; on their own they
    would claim $1,461)" and "[$7/month combined, $734 alone]". The snapshot page says the same
    words and figures: the report's `savings` and each one's combined share."""
    db = _idle_host_store(tmp_path)
    done = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db),
                           "--since", "1d"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    text = done.stdout.split("\nRecommendations (savings are upper bounds")[1]
    potential = next(x.strip() for x in text.splitlines() if "potential savings" in x)
    assert "combined (the host's bill: $2,920/month; on their own they would claim" in potential
    rows = re.findall(r"^  \[([^\]]*)\] ", text, re.M)
    assert len(rows) == 2 and all(" combined, $" in r for r in rows), rows
    page = render_store(db)
    assert potential.replace("'", "&#x27;") in page
    shown = re.findall(r'<td class="savings"[^>]*>([^<]*)</td>', page)
    assert sorted(shown) == sorted(rows), (shown, rows)


# At a phone's width: each table box's overflow (a sideways scrollbar), every cell past the
# screen's right edge, and whether the page scrolls sideways.
PHONE_SCRIPT = """(() => {
  const inner = window.innerWidth;
  return {inner, page: document.documentElement.scrollWidth,
          over: [...document.querySelectorAll('div.table')].map(b => b.scrollWidth - b.clientWidth)
                .filter(o => o > 0),
          cut: [...document.querySelectorAll('td')].filter(
                 c => c.getBoundingClientRect().right > inner + 0.5).map(c => c.textContent),
          labels: [...document.querySelectorAll('td[data-label]')].slice(0, 60).map(
                 c => getComputedStyle(c, '::before').content)};
})()"""


def test_on_a_phone_every_column_of_a_snapshot_page_is_on_the_screen(snapshot, tmp_path):
    """Probe 157 L1: at 390 px the snapshot page's tables scrolled sideways in their boxes, the
    columns that matter most off the screen: a process's burn, cost and phase balance, a GPU's
    peak memory, power and status, a recommendation's savings ("$734/montl") and evidence. On
    a phone each row stacks, a line per column headed by its name: no box scrolls sideways, no
    cell reaches past the screen."""
    html = tmp_path / "phone.html"
    render_html_file(snapshot, html)
    found = chromium.load(html.as_uri(), PHONE_SCRIPT, size=(390, 844)).value
    assert found["page"] <= found["inner"], found
    assert found["over"] == [] and found["cut"] == [], found
    assert '"cost: "' in found["labels"] and '"power: "' in found["labels"], found["labels"]
    wide = chromium.load(html.as_uri(), PHONE_SCRIPT, size=(1200, 1600)).value
    assert set(wide["labels"]) == {"none"}, wide["labels"]  # in columns at a laptop's width


def test_the_burn_chart_names_its_series_as_the_text_reports_burn_line(snapshot):
    """Probe 157 M5: the chart's grey series "unused $/h" was the burn of the GPUs no process
    held (the text's "no process"), where the review page's "paid GPU time unused" was the
    whole waste. The chart says "no process $/h", and what "wasted" counts."""
    page = render_store(snapshot)
    legend = re.search(r'data-chart="burn".*?<div class="legend">(.*?)</div>', page, re.S)
    assert legend, page
    assert re.findall(r"</i>([^<]*)</span>", legend[1]) == [
        "burn $/h", "wasted $/h", "no process $/h"]
    assert "unused $/h" not in page
    assert "wasted: GPU time paid and unused" in page


def test_evidence_writes_a_since_as_a_clock_time_a_rate_per_second_and_no_exponent():
    """Probe 157 L4: the evidence read "watched since: 1,796,635,799" (an epoch with thousands
    separators), "read bytes per s: 0 s" (a rate given in seconds) and "cpu idle cores:
    5.62e-05" (scientific notation)."""
    from daemon.report_html.render import _evidence

    html = _evidence({"no_sign_of_work": {
        "watched_since": T0, "read_bytes_per_s": 0.0, "write_bytes_per_s": 3 * 2**20,
        "cpu_idle_cores": 5.62e-05, "idle_watched_s": 282.0}})
    assert f"watched since</span>: {clock.local_time(T0)}<" in html, html
    assert "read bytes per s</span>: 0 B/s<" in html and "write bytes per s</span>: 3.0 MiB/s<" \
        in html, html
    assert "cpu idle cores</span>: 0.0000562<" in html, html
    assert "idle watched s</span>: 282 s<" in html, html  # seconds are still seconds


def test_the_trigger_line_says_why_in_words_not_the_events_internal_id(snapshot, tmp_path):
    """Probe 157 L6: the incident page's trigger line read "Taken because: gpu:3 is held idle
    (gpu_held_idle:gpu:3:1796635801.002) at ...": an internal id with a Unix time in it. It
    says since when the event stood instead."""
    event_id = f"gpu_held_idle:gpu:0:{T0 + 5:.3f}"
    out = tmp_path / "incident.db"
    write_snapshot(snapshot.parent / "mlcost.db", out, T0, T0 + 31, trigger={
        "kind": "gpu_held_idle", "target": "gpu:0", "at": T0 + 20,
        "event": {"id": event_id, "kind": "gpu_held_idle", "target": "gpu:0",
                  "started_at": T0 + 5},
        "reason": f"gpu:0 is held idle ({event_id})"})
    page = render_store(out)
    line = re.search(r'<div class="trigger">(.*?)</div>', page)
    assert line, page
    assert line[1] == (f"Taken because: <b>gpu:0 is held idle, since "
                       f"{clock.local_time(T0 + 5)}</b> at {clock.local_time(T0 + 20)}"), line[1]


def test_the_wasted_line_lying_on_the_burn_line_lets_it_show(snapshot):
    """Probe 157 L3: where all of the burn was wasted, the red wasted line lay exactly on the
    blue burn line and the burn line could not be seen (two of the legend's three series
    visible). Wasted and no process are drawn dashed over the solid burn line, and the legend
    draws them so."""
    page = render_store(snapshot)
    chart = re.search(r'<svg class="chart[^"]*" data-chart="burn".*?</svg>', page, re.S)
    assert chart, page
    lines = re.findall(r'<polyline class="series" data-series="([^"]*)"[^>]*?'
                       r'(?: stroke-dasharray="([^"]*)")? points=', chart[0])
    assert [name for name, _ in lines] == ["burn $/h", "wasted $/h", "no process $/h"], lines
    assert lines[0][1] == "" and lines[1][1] and lines[2][1] and lines[1][1] != lines[2][1]
    legend = page[chart.end():].split("</div>")[0]
    assert legend.count('class="dashed"') == 2, legend


LABEL_SCRIPT = """[...document.querySelectorAll('svg.chart.lines text')].map(
  t => t.getBoundingClientRect().height)"""


def test_on_a_phone_the_line_charts_labels_can_be_read(snapshot, tmp_path):
    """Probe 157 L2: the charts' 11-unit labels (the $ and % scales, the times) shrank with the
    viewBox to ~4 px at 390 px. On a phone they are 24 units, ~9 px; at 1200 px as before."""
    html = tmp_path / "labels.html"
    render_html_file(snapshot, html)
    phone = chromium.load(html.as_uri(), LABEL_SCRIPT, size=(390, 844)).value
    assert phone and min(phone) >= 8, phone
    wide = chromium.load(html.as_uri(), LABEL_SCRIPT, size=(1200, 1600)).value
    assert wide and max(wide) <= 14, wide  # (11-unit text at about 0.6 of its size)

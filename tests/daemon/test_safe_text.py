"""The one sanitizer for text from processes: control bytes shown as `\\x1b`, never kept."""

import logging
import re
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from daemon.sources.redact import RedactingFilter
from daemon.sources.safe_text import lines, one_line
from daemon.wire import Now, Process

# What a terminal may act on: C0 controls, DEL, C1 controls; and what reorders or cannot be
# encoded: bidi controls, lone surrogates; what hides (zero-width space, word joiner, BOM) and
# where a reader breaks a line (the Unicode line and paragraph separators).
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                    "\u200b\u2060\ufeff\u2028\u2029\ud800-\udfff]")
HOSTILE = ("\x1b]0;owned title\x07", "\x1b[2J", "\x1b]52;c;ZWNobyBwd25lZA==\x07", "\x9b31m",
           "\u202egnp.exe", "a\rforged line", "x\nINFO forged", "\x00\x7f")


def test_escape_sequences_are_shown_as_their_python_escapes():
    assert one_line("\x1b]0;title\x07") == "\\x1b]0;title\\x07"
    assert one_line("\x1b[2J") == "\\x1b[2J"
    assert one_line("\x1b]52;c;Zm9v\x07") == "\\x1b]52;c;Zm9v\\x07"
    assert one_line("a\x9bb\x7fc\x00") == "a\\x9bb\\x7fc\\x00"


def test_newline_tab_and_carriage_return_are_shown_in_one_line_and_lines_keeps_two():
    assert one_line("a\nb\tc\rd") == "a\\nb\\tc\\rd"
    # a carriage return overwrites a line on a terminal: never kept, even in text of lines
    assert lines("a\nb\tc\rd\x1b[2J") == "a\nb\tc\\rd\\x1b[2J"


def test_bidi_controls_and_bytes_that_were_not_utf8_are_shown():
    assert one_line("evil\u202egnp.exe") == "evil\\u202egnp.exe"
    # psutil decodes /proc with surrogateescape: the byte 0xff arrives as U+DCFF
    assert one_line(b"caf\xff".decode("utf-8", "surrogateescape")) == "caf\\xff"
    assert one_line("\ud800") == "\\ud800"
    one_line("caf\udcff").encode("utf-8")  # now writable to a UTF-8 terminal and to SQLite


def test_line_separators_and_invisible_marks_are_shown():
    """Probe 110: U+2028 and U+2029 passed raw into /v1/now, the store and the HTML report,
    where str.splitlines() (and log viewers) break a line; the zero-width space and the BOM
    hid characters. The joiners that some scripts and emoji need are kept."""
    assert one_line("job\u2028INFO forged\u2029x") == "job\\u2028INFO forged\\u2029x"
    assert lines("a\u2028b\nc") == "a\\u2028b\nc"
    assert one_line("rm\u200b -rf\ufeff\u2060") == "rm\\u200b -rf\\ufeff\\u2060"
    assert len(one_line("job\u2028x").splitlines()) == 1
    assert one_line("\U0001f469\u200d\U0001f52c \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645") == \
        "\U0001f469\u200d\U0001f52c \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"


def test_ordinary_text_is_left_as_it_is():
    text = "python3 train.py --lr 3e-4 --name 'résumé 中文' C:\\path\\x1b [bold]x[/bold] 😀"
    assert one_line(text) == text
    assert lines(text) == text


@given(st.text())
def test_nothing_unsafe_is_left_and_a_second_pass_changes_nothing(text):
    for show in (one_line, lines):
        shown = show(text)
        assert not UNSAFE.search(shown.replace("\n", "").replace("\t", ""))
        assert show(shown) == shown
    assert "\n" not in one_line(text) and "\t" not in one_line(text)


# Not Cf, but invisible: the Hangul fillers and the variation selectors (shown as escapes too).
INVISIBLE_LETTERS = re.compile("[\u115f\u1160\u3164\uffa0\ufe00-\ufe0f\U000e0100-\U000e01ef]")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Cf", "Zl", "Zp"))))
def test_text_without_controls_is_unchanged(text):
    text = INVISIBLE_LETTERS.sub("", text)
    assert one_line(text) == text


def test_every_format_character_and_invisible_letter_is_shown_but_the_joiners():
    """Probe 139 F2: a frame named with a soft hyphen (U+00AD) and a tag character (U+E0041)
    reached the details screen, the report and the HTML as written: hidden text, forged
    spacing. Every Unicode format character (category Cf) is shown now, save the zero-width
    joiner and non-joiner (scripts and emoji need them); so are the Hangul fillers and the
    variation selectors."""
    assert one_line("train\u00adpy\U000e0041") == "train\\xadpy\\U000e0041"
    assert one_line("a\u3164b\u115fc\ufe0fd\u2062e\u206af") == \
        "a\\u3164b\\u115fc\\ufe0fd\\u2062e\\u206af"
    for code in range(0x110000):
        char = chr(code)
        if unicodedata.category(char) == "Cf" and code not in (0x200C, 0x200D):
            assert one_line(char) != char, hex(code)
    assert one_line("a\u200cb\u200dc") == "a\u200cb\u200dc"


def test_the_log_shows_control_bytes_and_keeps_one_record_one_line():
    record = logging.LogRecord("mlcostd", logging.WARNING, __file__, 1,
                               "process %s exited", ("x\x1b]0;pwned\x07\nINFO forged",), None)
    RedactingFilter().filter(record)
    message = record.getMessage()
    assert "\x1b" not in message and "\n" not in message
    assert message == "process x\\x1b]0;pwned\\x07\\nINFO forged exited"


def test_wire_values_are_safe_to_print_whatever_the_daemon_sent():
    hostile = "".join(HOSTILE)
    now = Now.from_dict({
        "host": {"hostname": hostile, "instance": {"type": hostile}},
        "processes": [{"pid": 1, "start_time": 1.0, "user": hostile, "command": hostile,
                       "workload": hostile, "owner": {"pod": hostile},
                       "phases": {"idle": {"top_stacks": [{"frames": [[hostile, hostile, 1]]}]}}}],
        "recommendations": [{"id": "r", "summary": hostile, "evidence": {"why": [hostile]},
                             "action": {"commands": [hostile]}}],
        "events": [{"id": "e", "target": hostile, "detail": hostile}],
    })
    process: Process = now.processes[0]
    texts = [now.hostname, str(now.instance), process.user, process.command,
             str(process.workload), str(process.owner), str(process.phases),
             now.recommendations[0].summary, str(now.recommendations[0].evidence),
             str(now.recommendations[0].action), now.events[0].target, now.events[0].detail]
    for text in texts:
        assert "\x1b" not in text and "\x9b" not in text and "\u202e" not in text, text
    assert "\n" not in process.command and "\\x1b]0;owned title" in process.command


def test_check_and_report_text_show_control_bytes():
    from daemon.commands import check, report

    shown = check.render([check.Check("py-spy", check.WARN, "pid 7: \x1b]0;x\x07 failed",
                                      "run \x1b[2J as root")])
    assert "\x1b" not in shown and "\\x1b]0;x\\x07" in shown
    assert report.short_command(one_line("python\x1b[2J -m x")) == "python\\x1b[2J -m x"


def test_texts_keep_what_tells_processes_and_jobs_apart():
    """Commands and names are bounded where they are printed, by what tells them apart (the
    module's or script's own name, then its arguments) and cut with an ellipsis that says so:
    two jobs alike in their first 40 characters are two lines a reader tells apart."""
    from daemon.commands import idle, report

    command = "/opt/conda/envs/train/bin/python3 -m team.research.workloads.resnet50_finetune --lr 0.1"
    answer = idle.render_text({"active": True, "reason": "kernels", "gpus": [], "processes": [
        {"pid": 7, "active": True, "kind": "training", "command": command, "evidence": []}]})
    assert "[python3 -m …resnet50_finetune --lr 0.1]" in answer
    phases = report._render_phases([{"pid": 7, "command": command, "phases": {
        "compute": {"share": 1.0, "top_stacks": []}}}])
    assert "  7 python3 -m …resnet50_finetune --lr 0.1: compute 100%" in phases
    jobs = ["team.research.workloads.resnet50_finetune_run1",
            "team.research.workloads.resnet50_finetune_run2"]
    lines = "\n".join(report.render_review({
        "since": 0.0, "until": 3600.0, "spend": {"total": 2.0, "per_day": 48.0, "by_month": {},
                                                "by_day": {}},
        "by": {"job": [{"name": name, "cost": 1.0} for name in jobs]}}))
    assert all(f"{name} $1.00" in lines for name in jobs)
    long = report.render_review({
        "since": 0.0, "until": 3600.0, "spend": {"total": 1.0, "per_day": 24.0, "by_month": {},
                                                "by_day": {}},
        "by": {"job": [{"name": "j" * 500, "cost": 1.0}]}}, width=100)
    assert f"{'j' * 59}… $1.00" in "\n".join(long)

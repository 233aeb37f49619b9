"""Commands measured in terminal cells, not code points (probe 154 L1): a command of CJK or
emoji kept its full length in code points and showed twice as wide, so `short_command` handed
mlcost-top a text wider than its column (the table then cut it silently, no `…`) or whole where
the column could not hold it; and the report's columns, padded with `str.ljust`, went out of
line after a wide name."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from daemon.wire import crop, program_words, short_command

# The probe's process (weird.py, busy on GPU 6): CJK, emoji and a combining accent in its argv.
PROBE = "/usr/bin/python3 /x/weird.py データ学習_训练_🚀🔥 --a=1 --b=2"
WEIRD = ("/usr/bin/python3 /x/weird.py データ学習_训练_🚀🔥 e\u0301 "
         + " ".join(f"--very-long-option-{i:03d}=value" for i in range(1, 201)))


@pytest.mark.parametrize("width", [10, 12, 20, 25, 30, 40, 48, 60, 80])
def test_a_cut_command_fits_its_cells_and_says_it_was_cut(width):
    for command in (PROBE, WEIRD):
        shown = short_command(command, width)
        assert cell_len(shown) <= width, (width, shown)  # as the table counts it
        words = program_words(command)
        whole = (" ".join(words), " ".join(words[1:]))  # (the interpreter dropped when narrow)
        if shown not in whole:  # anything left out ends with the ellipsis
            assert shown.endswith("…"), (width, shown)


def test_the_probes_command_at_25_and_40_cells():
    """At 25 it was 'weird.py データ学習_训练_🚀🔥 --a…' (34 cells, the table cut it to
    'weird.py データ学習_训练_', no `…`); at 40 the whole 49-cell command came back uncut."""
    assert short_command(PROBE, 25) == "weird.py データ学習_训练…"
    assert cell_len(short_command(PROBE, 25)) == 25
    at_40 = short_command(PROBE, 40)
    assert at_40.endswith("…") and cell_len(at_40) <= 40
    assert short_command(PROBE, 60) == "python3 weird.py データ学習_训练_🚀🔥 --a=1 --b=2"


def test_cells_count_as_the_terminal_does():
    from daemon.wire import cells  # (new with the fix: imported here, the others fail alone)

    assert cells("weird.py") == 8
    assert cells("データ学習") == 10
    assert cells("🚀🔥") == 4
    assert cells("e\u0301") == 1  # a combining accent takes no cell
    assert cells("a\u200db") == 2  # nor a zero-width joiner
    for text in (PROBE, WEIRD, "ｆｕｌｌ　ｗｉｄｔｈ", "Ωμέγα", "한국어 텍스트", "\u202eevil"):
        assert cells(text) == cell_len(text), text


def test_crop_keeps_a_combining_mark_with_its_letter_and_never_splits_a_wide_one():
    assert crop("ae\u0301bc", 3) == "ae\u0301…"
    assert crop("学習学習", 4) == "学…"  # 3 cells of room: one wide character and the `…`
    assert crop("学習", 4) == "学習"
    assert crop("abc", 0) == ""


def test_the_report_columns_line_up_after_a_wide_name():
    from daemon.commands.report import _table

    rows = [["データ学習", "1"], ["plain", "2"]]
    lines = _table(["user", "n"], rows)
    columns = {cell_len(line[:-1]) for line in lines}  # where the last column starts
    assert len(columns) == 1, lines
    from daemon.wire import pad

    assert pad("学", 4) == "学  "

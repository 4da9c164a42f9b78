"""Report text: Markdown tables and durations, shared by both reports and both logs."""

import pytest

from dataecho.experiments.text import hms, md_table


def test_a_table_has_a_header_a_separator_by_alignment_and_one_line_per_row():
    lines = md_table(["R", "variant", "speedup"], [["6", "batch", "2.00x"], ["4", "", "-"]],
                     "lrr")
    assert lines == ["| R | variant | speedup |", "|---|---:|---:|",
                     "| 6 | batch | 2.00x |", "| 4 | | - |"]


@pytest.mark.parametrize("align", ["lr", "lrx"])
def test_an_alignment_that_does_not_fit_the_header_is_refused_with_the_fix(align):
    with pytest.raises(ValueError, match=rf"align must have one 'l' or 'r' per column "
                                         rf"\(3 columns\), got '{align}'; pass e\.g\. 'lll'"):
        md_table(["a", "b", "c"], [], align)


def test_durations_read_hours_minutes_seconds_with_the_seconds_truncated():
    assert [hms(s) for s in (0.0, 59.9, 3600.0, 36125.5)] == [
        "0:00:00", "0:00:59", "1:00:00", "10:02:05"]

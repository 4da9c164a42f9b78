import pytest

from dataecho.tour import main


def test_help_shows_the_summary_not_the_docstring_example(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "Prints the first batches of each variant" in out
    assert ">>>" not in out and "doctest" not in out


def test_the_tour_prints_each_variant_with_its_counts(capsys):
    assert main(["--examples", "8", "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    for variant in ("baseline", "before_augmentation", "after_augmentation", "batch"):
        assert f"\n{variant}: " in out
    assert out.count("fresh 8 examples, emitted 16 (factor 2.000)") == 3
    assert out.count("fresh 8 examples, emitted 8 (factor 1.000)") == 1

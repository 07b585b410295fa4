"""Shared by the bad-input tests: a command refused the way every bad input must be."""


def refused(capsys, main, argv, *needles) -> str:
    """main(argv) refuses: exit 2, no traceback, one line on stderr containing every needle.
    Returns that line."""
    capsys.readouterr()  # drop what fixtures printed (Ray's start-up lines)
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]

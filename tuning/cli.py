"""What the command lines share: a bad flag is one line and exit 2, like every other bad input."""

import argparse


class UsageError(Exception):
    """Bad input: the command exits 2 with this one-line message."""


class Parser(argparse.ArgumentParser):
    """argparse, except that a bad flag raises UsageError (one line) instead of dumping the usage."""

    def error(self, message):
        raise UsageError(f"{message} (see --help)")

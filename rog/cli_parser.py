"""Command-line parsers a person can read: a one-line usage (``usage: run.py [options]; see --help``), every
mistake as ONE ``<prog>: error: ...`` line naming the fix (exit status 2, no usage block), the closest
known name for a misspelt one, and renamed flags kept as aliases that print a one-line note."""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import Iterable


def closest(name: str, known: Iterable[str]) -> str:
    """``"; did you mean X"`` for the known name closest to ``name`` (difflib), or ``""`` when none is close."""
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {match[0]}" if match else ""


class OneLineParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line (``prog: error: message; see prog --help``) with
    exit status 2, and whose default usage line is ``prog [options]; see --help``."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("usage", "%(prog)s [options]; see --help")
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        """Print one line and exit 2 (argparse's own messages included: invalid choice, unknown flag)."""
        if message.startswith("unrecognized arguments: "):
            flags = [o for a in self._actions for o in a.option_strings if a.help != argparse.SUPPRESS]
            unknown = message.split(": ", 1)[1].split()
            hint = closest(unknown[0].split("=", 1)[0], flags) if unknown and unknown[0].startswith("-") else ""
            message += hint
        text = " ".join(str(message).split())  # one line, whatever the message held
        self.exit(2, f"{self.prog}: error: {text}; see {self.prog} --help\n")


def add_renamed(container, old: str, new: str, dest: str, **kwargs) -> argparse.Action:
    """Accept the old spelling ``old`` of flag ``new`` (same ``dest``, hidden from --help); using it prints
    ``<prog>: note: OLD is now NEW (the old spelling still works for this release)`` once on stderr."""

    class Renamed(argparse._StoreAction):
        renamed_to = new

        def __call__(self, parser, namespace, values, option_string=None):
            print(f"{parser.prog}: note: {old} is now {new} (the old spelling still works for this release)",
                  file=sys.stderr, flush=True)
            super().__call__(parser, namespace, values, option_string)

    return container.add_argument(old, dest=dest, action=Renamed, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                                  **kwargs)

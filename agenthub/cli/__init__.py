"""The `agenthub` command line. Heavy libraries are imported only by the commands that need
them, after arguments are parsed, so `agenthub --help` answers at once."""

from agenthub.cli._main import main

__all__ = ["main"]

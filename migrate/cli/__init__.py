"""The ``migrate`` command line: ``commands`` (subcommands and exit codes), ``inputs`` (reading and checking the flags'
files), ``report`` (the one report object that decides the exit code)."""
from migrate.cli.commands import main

__all__ = ["main"]

"""The ``migrate`` command line: ``commands`` (subcommands and exit codes), ``options`` (the flags resolved once into a
frozen object per command), ``inputs`` (reading and checking the flags' files), ``report`` (the one report object that
decides the exit code and writes what the command found), ``interrupts`` (Ctrl-C and SIGTERM: exit 130, one line),
``data_commands`` (``migrate data``); the all-or-nothing output folder of ``all`` and ``data convert`` is
``migrate.staged_folder``.

This package imports nothing heavy itself: ``command_line`` (``python -m migrate``, the ``migrate`` script) installs
the interrupt handling first, so that Ctrl-C while torch and MXNet import already ends in one line. ``import migrate``
imports nothing of the command line.
"""
from migrate.cli import interrupts

__all__ = ["main", "command_line"]


def main(argv=None) -> int:
    """Run the ``migrate`` command line in this program and return its exit code (``commands.main``).

    Examples:
        >>> main(["map", "--symbol", "net-symbol.json", "--params", "net-0000.params", "--torch",
        ...       "mypkg.models:net", "--input-shape", "1,3,32,32", "--out", "mapping.json"])  # doctest: +SKIP
        0
    """
    from migrate.cli.commands import main as run
    return run(argv)


def command_line(argv=None) -> None:
    """The ``migrate`` program (``python -m migrate``, the ``migrate`` script): install the interrupt handling
    (``interrupts.mark_command_line``), run ``main`` and end the process with its code (``interrupts.exit_process``);
    a signal at any point ends it with exit 130 and one line.

    Examples:
        >>> command_line(["all", "--help"])  # doctest: +SKIP
    """
    interrupts.mark_command_line(argv)
    interrupts.exit_process(main(argv))

"""``python -m migrate``: the ``migrate`` command."""
from migrate.cli import command_line

if __name__ == "__main__":
    command_line()

"""``python -m migrate``: the ``migrate`` command."""
import sys

from migrate.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""Where verification and generation import ``model_source`` from until they import ``migrate.source``."""
from migrate.source.reading import model_source

__all__ = ["model_source"]

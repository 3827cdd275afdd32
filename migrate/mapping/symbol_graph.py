"""Where verification and generation import the graph helpers from until they ask the source
(``MxSource.document``, ``aux_names``, ``parameter_users``)."""
import json

from mxformats.symbol import SymbolGraph

from migrate.source.base import parameter_users
from migrate.source.files import aux_state_names, graph_document


def symbol_document(symbol) -> dict:
    """The symbol JSON document of ``symbol``: a ``SymbolGraph`` or an ``mx.sym.Symbol``."""
    return graph_document(symbol) if isinstance(symbol, SymbolGraph) else json.loads(symbol.tojson())


__all__ = ["aux_state_names", "parameter_users", "symbol_document"]

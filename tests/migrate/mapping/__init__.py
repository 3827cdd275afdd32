"""Tests of migrate.mapping: export, graph, match, the mapping table, weights, model families."""

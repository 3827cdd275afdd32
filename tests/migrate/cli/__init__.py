"""Tests of the migrate command line: subcommands, `all`, hostile inputs, interrupts."""

"""The `varstore` command line: a thin client of the varstore library (entry point: main.cli)."""

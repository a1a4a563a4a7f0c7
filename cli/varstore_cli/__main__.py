"""`python -m varstore_cli ...` runs the `varstore` command."""

from varstore_cli.main import cli

cli(prog_name="varstore")

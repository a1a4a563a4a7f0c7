"""`python -m varstore_cli ...` runs the varstore command line."""

from varstore_cli.main import cli

cli()

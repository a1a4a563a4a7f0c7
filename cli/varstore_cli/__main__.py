"""`python -m varstore_cli ...` runs the `varstore` command (through entry.py: Ctrl-C handled from the start)."""

from varstore_cli.entry import main

main()

"""`python -m budgettune` runs the command line."""

from budgettune.cli import main

main()

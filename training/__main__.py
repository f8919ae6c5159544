"""`python -m training …` runs the typer app of training/cli.py."""

from training.cli import main

main()

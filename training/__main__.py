"""`python -m training …` runs the typer app of training/cli/main.py."""

from training.cli.main import main

main()

"""``python -m pgpulse`` runs the command line."""

from pgpulse.cli.main import main

main()

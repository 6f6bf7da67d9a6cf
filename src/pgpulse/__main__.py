"""``python -m pgpulse`` runs the command line."""

from pgpulse.cli import main

main()

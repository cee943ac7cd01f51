"""``python -m experiments.report``: see ``experiments.report.runner``."""

import sys

try:
    from experiments.report.runner import main

    status = main()
except KeyboardInterrupt:  # before the first section started (imports, argument checks): nothing written
    print("\ninterrupted before any section ran: nothing was written", file=sys.stderr)
    status = 130
raise SystemExit(status)

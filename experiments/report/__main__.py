"""``python -m experiments.report``: see ``experiments.report.runner``."""

import os
import sys

INTERRUPTED = 130

try:
    from experiments.report.runner import main

    status = main()
except KeyboardInterrupt:  # before the first section started (imports, argument checks): nothing written
    print("\ninterrupted before any section ran: nothing was written", file=sys.stderr)
    status = INTERRUPTED
if status == INTERRUPTED:
    # The report files are in place and closed; an interrupt inside JAX / XLA work can leave its threads in a
    # state that crashes interpreter teardown (SIGSEGV), so leave without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(INTERRUPTED)
raise SystemExit(status)

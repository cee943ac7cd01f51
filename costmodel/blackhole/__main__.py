"""``python -m costmodel.blackhole ...``: the what-if CLI and its subcommands (see ``costmodel.blackhole.cli``)."""

import sys

from costmodel.blackhole.cli import main

# the report subcommands return their exit status (2: bad input); the what-if and calibrate return
# their result (bad input raises SystemExit itself)
status = main(sys.argv[1:])
sys.exit(status if isinstance(status, int) else 0)

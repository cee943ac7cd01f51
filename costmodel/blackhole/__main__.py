"""``python -m costmodel.blackhole ...``: the what-if CLI and ``calibrate`` (see ``costmodel.blackhole.cli``)."""

import sys

from costmodel.blackhole.cli import main

main(sys.argv[1:])

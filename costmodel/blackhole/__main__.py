"""``python -m costmodel.blackhole ...``: the what-if CLI (see ``costmodel.blackhole.main``)."""

import sys

from costmodel.blackhole import main

main(sys.argv[1:])

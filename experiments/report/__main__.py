"""``python -m experiments.report``: see ``experiments.report.runner``."""

from experiments.report.runner import main

raise SystemExit(main())

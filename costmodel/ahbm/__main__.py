import sys

from costmodel.ahbm.cli import main

sys.exit(main())

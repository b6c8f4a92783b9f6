"""`python -m cnkispider.cli`: the `cnkispider` command (worker processes are started so)."""

import sys

from cnkispider.cli import main

sys.exit(main())

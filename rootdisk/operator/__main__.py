"""``python -m rootdisk.operator``."""

import sys

from rootdisk.operator.main import main

sys.exit(main())

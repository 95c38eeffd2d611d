import sys

from rootdisk.cli import main

sys.exit(main())

import sys

from susurrus.transports.cli import main

sys.exit(main())

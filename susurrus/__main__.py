import sys

from susurrus.cli.main import main

sys.exit(main())

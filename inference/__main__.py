import sys

from inference.tools.cli import main

sys.exit(main())

import sys

from agenthub.cli import main

sys.exit(main())

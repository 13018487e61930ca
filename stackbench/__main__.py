import sys

from stackbench.cli import main

sys.exit(main())

"""`python -m flexflow`: the same as the `flexflow` command."""

import sys

from flexflow.cli import main

sys.exit(main())

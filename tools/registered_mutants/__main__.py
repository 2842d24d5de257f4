"""python -m tools.registered_mutants --backend cpu|cuda [--fix N] [--json]"""

import sys

from tools.registered_mutants.harness import main

sys.exit(main())

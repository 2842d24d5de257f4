import sys

from sglang_overlay.cli import main

sys.exit(main())

from sglang_overlay.cli import main

raise SystemExit(main())

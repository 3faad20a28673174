from balagg.cli import main

raise SystemExit(main())

from sluicegate.cli import main

raise SystemExit(main())

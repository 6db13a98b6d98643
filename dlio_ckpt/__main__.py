from dlio_ckpt.cli.main import main

raise SystemExit(main())

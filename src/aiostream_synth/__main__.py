from aiostream_synth._proxy.cli import main

raise SystemExit(main())

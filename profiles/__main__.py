"""``python -m llmsim.profiles <verb> ...`` (see llmsim.profiles.cli)."""

from llmsim.profiles.cli import main

raise SystemExit(main())

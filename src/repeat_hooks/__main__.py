"""``python -m repeat_hooks replay ...``: the same as the ``repeat-hooks`` console script."""

from .offline.cli import main

raise SystemExit(main())

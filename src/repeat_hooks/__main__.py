"""``python -m repeat_hooks replay ...``: the same as the ``repeat-hooks`` console script."""

from .cli import main

raise SystemExit(main())

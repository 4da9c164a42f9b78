"""``python -m dataecho`` is the ``dataecho`` command."""

from .cli import main

raise SystemExit(main())

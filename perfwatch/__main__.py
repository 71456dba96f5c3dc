"""`python -m perfwatch` is the same as the `perfwatch` console script."""

from perfwatch.cli import main

raise SystemExit(main())

from __future__ import annotations

from zilean.cli import main

main()

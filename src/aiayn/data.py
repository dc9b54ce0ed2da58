"""Generated tasks for the chapters. No downloads: every data set is generated, seeded
and reproducible."""

from __future__ import annotations

import torch  # noqa: F401  (used by the task generators appended below)

__all__: list[str] = []

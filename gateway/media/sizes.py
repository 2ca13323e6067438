"""What the resize rules share: a target size and the aspect-ratio limit the reference resizers enforce."""
from __future__ import annotations

from typing import NamedTuple

MAX_ASPECT_RATIO = 200  # the reference smart_resize refuses anything longer


class Size(NamedTuple):
    height: int
    width: int

"""``nodeup.util.accelerators``, as Ray's ``ray.util.accelerators``: the GPU
model names of ``nodeup.accelerators`` for ``accelerator_type=``."""

from ..accelerators import *  # noqa: F401,F403
from ..accelerators import __all__  # noqa: F401

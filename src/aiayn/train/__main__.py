"""``python -m aiayn.train`` and ``torchrun -m aiayn.train``: see :mod:`aiayn.train.cli`."""

from aiayn.train.cli import run

run()

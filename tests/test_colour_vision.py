"""The book's colour maps, as readers with a colour-vision deficiency see them.

Each map the figures use (every ``cmap="..."`` in the package and the chapters, and the style's
default ``image.cmap``) is sampled at nine points and passed through the simulation of
protanopia, deuteranopia and tritanopia of Machado, Oliveira and Fernandes (2009, severity 1,
on linear RGB), then compared in CIELAB:

- a sequential map must stay ordered: lightness L* strictly monotonic, and neighbouring
  samples at least 5 apart (Delta E, CIE76), so that more still reads as darker;
- a diverging map must keep its two sides apart: its ends at least 30 apart, and lightness
  falling from the centre towards each end.

The classic red-green map (RdYlGn) fails the second rule under protanopia and deuteranopia
(its ends 18.5 and 17.6 apart), and jet, a rainbow, fails the first under every vision: the
checks can fail.

Categorical colours that tell things apart by colour alone (chapter 4's relations: the
previous token, the matching one, the token itself, elsewhere, as boxes and stacked bars) must
stay at least 20 apart (Delta E) under every vision; green and orange, which chapter 4 once
used, are 4.6 apart under protanopia and fail; so must chapter 8's four layers (their colours
were once blue and purple, 2.7 apart under protanopia). That the lines of a legend differ by
more than colour is checked in tests/test_legends.py.
"""

import re
from pathlib import Path

import matplotlib
import numpy as np
import pytest

from aiayn.figures.style import use_book_style

ROOT = Path(__file__).resolve().parents[1]
MACHADO = {  # severity 1; rows give the simulated linear R, G, B
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                   [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                     [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                   [0.004733, 0.691367, 0.303900]],
}
VISIONS = ["typical", *MACHADO]
DIVERGING = {"RdBu", "RdBu_r", "RdYlGn", "PiYG", "coolwarm", "bwr", "seismic", "PuOr"}
MIN_STEP, MIN_ENDS, MIN_APART = 5.0, 30.0, 20.0


def book_colormaps() -> set[str]:
    """Every colour map named in the package's figures and the chapters, and the default."""
    sources = [*ROOT.glob("src/aiayn/**/*.py"), *ROOT.glob("book/*.ipynb")]
    named = {m for p in sources for m in re.findall(r'cmap\\?"?\s*[=:]\s*\\?"(\w+)\\?"', p.read_text())}
    with matplotlib.rc_context():  # the style's default map, without changing other tests' style
        use_book_style()
        default = matplotlib.rcParams["image.cmap"]
    return named | {default}


def _linear(rgb: np.ndarray) -> np.ndarray:
    return np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)


def _lab(linear_rgb: np.ndarray) -> np.ndarray:
    to_xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                       [0.0193, 0.1192, 0.9505]])
    xyz = linear_rgb @ to_xyz.T / np.array([0.95047, 1.0, 1.08883])  # D65 white = 1
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], 1)


def seen(name: str, vision: str, n: int = 9) -> np.ndarray:
    """(n, 3) CIELAB colours of the map ``name`` at n evenly spaced points, as ``vision`` sees them."""
    linear = _linear(matplotlib.colormaps[name](np.linspace(0, 1, n))[:, :3])
    if vision != "typical":
        linear = np.clip(linear @ np.array(MACHADO[vision]).T, 0, 1)
    return _lab(linear)


def problems(name: str) -> list[str]:
    found = []
    for vision in VISIONS:
        lab = seen(name, vision)
        lightness, steps = lab[:, 0], np.linalg.norm(np.diff(lab, axis=0), axis=1)
        if name in DIVERGING:
            centre = len(lab) // 2
            ends = float(np.linalg.norm(lab[0] - lab[-1]))
            if ends < MIN_ENDS:
                found.append(f"{name}, {vision}: its ends are {ends:.0f} apart (< {MIN_ENDS:.0f})")
            if not (np.all(np.diff(lightness[:centre + 1]) > 0)
                    and np.all(np.diff(lightness[centre:]) < 0)):
                found.append(f"{name}, {vision}: lightness does not fall from the centre to the ends")
        else:
            rising = np.diff(lightness)
            if not (np.all(rising > 0) or np.all(rising < 0)):
                found.append(f"{name}, {vision}: lightness is not monotonic")
            if steps.min() < MIN_STEP:
                found.append(f"{name}, {vision}: neighbours {steps.min():.1f} apart (< {MIN_STEP:.0f})")
    return found


def test_the_book_uses_the_maps_checked_here():
    assert book_colormaps() >= {"Blues", "RdBu_r", "viridis"}


@pytest.mark.parametrize("name", sorted(book_colormaps()))
def test_colormap_reads_with_colour_vision_deficiencies(name):
    assert not problems(name)


def test_a_rainbow_map_fails():
    found = problems("jet")
    assert all(any(f"{v}: lightness is not monotonic" in p for p in found) for v in VISIONS)


def test_a_red_green_map_fails():
    found = problems("RdYlGn")
    assert any("protanopia: its ends" in p for p in found)
    assert any("deuteranopia: its ends" in p for p in found)
    assert not any("typical" in p for p in found)


def categorical_problems(colours: dict[str, str]) -> list[str]:
    """Pairs of ``colours`` (label: colour) closer than MIN_APART under some vision."""
    import itertools

    import matplotlib.colors

    found = []
    for vision in VISIONS:
        linear = _linear(np.array([matplotlib.colors.to_rgb(c) for c in colours.values()]))
        if vision != "typical":
            linear = np.clip(linear @ np.array(MACHADO[vision]).T, 0, 1)
        lab = dict(zip(colours, _lab(linear), strict=True))
        for a, b in itertools.combinations(colours, 2):
            apart = float(np.linalg.norm(lab[a] - lab[b]))
            if apart < MIN_APART:
                found.append(f"{a} and {b}, {vision}: {apart:.1f} apart (< {MIN_APART:.0f})")
    return found


def test_chapter4_relation_colours_stay_apart():
    from aiayn.figures.heads import RELATION_COLORS

    assert not categorical_problems(RELATION_COLORS)


def test_chapter8_layer_colours_stay_apart():
    from aiayn.figures.costs import LAYER_STYLES

    assert not categorical_problems({kind: style["color"] for kind, style in LAYER_STYLES.items()})


def test_green_and_orange_fail():
    found = categorical_problems({"previous": "tab:green", "matching": "tab:orange"})
    assert any(p.startswith("previous and matching, protanopia: 4.6 apart") for p in found), found


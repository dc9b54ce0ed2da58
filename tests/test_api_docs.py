"""Every public name of ``aiayn`` is documented, and the API page covers every module of the
package and of its subpackages (each subpackage has a docstring; its modules hold the names)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import aiayn

API_PAGE = Path(__file__).resolve().parents[1] / "book" / "api.md"
_WALK = list(pkgutil.walk_packages(aiayn.__path__, prefix="aiayn."))
MODULES = sorted(m.name.removeprefix("aiayn.") for m in _WALK
                 if not m.ispkg and not m.name.rsplit(".", 1)[1].startswith("_"))
SUBPACKAGES = sorted(m.name.removeprefix("aiayn.") for m in _WALK if m.ispkg)


def public_names(module_name: str) -> list[str]:
    module = importlib.import_module(f"aiayn.{module_name}")
    return list(getattr(module, "__all__", []))


@pytest.mark.parametrize("module_name", MODULES)
def test_module_declares_and_documents_its_public_names(module_name):
    module = importlib.import_module(f"aiayn.{module_name}")
    assert inspect.getdoc(module), f"aiayn.{module_name} has no module docstring"
    names = public_names(module_name)
    assert names, f"aiayn.{module_name} declares no __all__"
    for name in names:
        obj = getattr(module, name)
        assert inspect.getdoc(obj), f"aiayn.{module_name}.{name} has no docstring"
    defined_here = [
        name for name, obj in vars(module).items()
        if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj))
        and obj.__module__ == module.__name__
    ]
    unlisted = sorted(set(defined_here) - set(names))
    assert not unlisted, f"aiayn.{module_name} defines public {unlisted} outside __all__"


@pytest.mark.parametrize("module_name", MODULES)
def test_api_page_includes_every_module(module_name):
    directives = re.findall(r"\.\. automodule:: (aiayn[.\w]+)", API_PAGE.read_text())
    assert f"aiayn.{module_name}" in directives, f"book/api.md lacks aiayn.{module_name}"


def test_top_level_names_are_documented_in_their_modules():
    for name in aiayn.__all__:
        obj = getattr(aiayn, name)
        home = obj.__module__.removeprefix("aiayn.")
        assert name in public_names(home), f"aiayn.{name} is not in aiayn.{home}.__all__"


def test_subpackages_are_found_and_say_what_they_hold():
    assert SUBPACKAGES == ["exercises", "experiments", "figures", "learning", "train"]
    for name in SUBPACKAGES:
        assert inspect.getdoc(importlib.import_module(f"aiayn.{name}")), f"aiayn.{name}: no docstring"

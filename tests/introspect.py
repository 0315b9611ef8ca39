"""The universes exhaustiveness tests check, found by walking the package, never listed."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def modules_under(package: str) -> list[ModuleType]:
    """Every module of `package`, imported; `__main__` aside (importing it runs the CLI)."""
    root = importlib.import_module(package)
    found = [root]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if not info.name.endswith(".__main__"):
            found.append(importlib.import_module(info.name))
    return found


def classes_defined_in(modules: list[ModuleType], base: type) -> list[type]:
    """Subclasses of `base` that the modules define themselves (not those they import)."""
    return [
        value
        for module in modules
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, base)
        and value.__module__ == module.__name__
    ]

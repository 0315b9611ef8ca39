"""Where a message variable comes from: the assignments of one function.

`logger.info(msg)` logs a string built earlier in the function (`msg = ...`, `msg += ...`,
`parts = [...]; parts.append(...)`); a Scope finds those pieces for sources.templates.
"""

from __future__ import annotations

import ast


class Scope:
    """String assignments of one function, to resolve `logger.info(msg)`; read on first
    use (walking every function up front was half of the extraction's time)."""

    def __init__(self, body: ast.AST) -> None:
        self.body = body
        self._assigns: dict[str, list[tuple[int, ast.expr, bool]]] | None = None

    @property
    def assigns(self) -> dict[str, list[tuple[int, ast.expr, bool]]]:
        if self._assigns is None:
            self._assigns = {}
            self._collect()
        return self._assigns

    def _collect(self) -> None:
        for node in ast.walk(self.body):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                self._add(node.targets[0], node.value, node.lineno, False)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                self._add(node.target, node.value, node.lineno, False)
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
                self._add(node.target, node.value, node.lineno, True)

    def _add(self, target: ast.expr, value: ast.expr, line: int, augmented: bool) -> None:
        if isinstance(target, ast.Name) and self._assigns is not None:
            self._assigns.setdefault(target.id, []).append((line, value, augmented))

    def value_of(self, name: str, before: int) -> list[list[ast.expr]]:
        """The ways `name` can be built before line `before`: its last plain assignment,
        then the `+=` parts that follow in its block. A part under an `if` without `else`
        is optional and left out; an `if`/`else` that adds in both gives one way per branch."""
        earlier = sorted(a for a in self.assigns.get(name, []) if a[0] < before and not a[2])
        if not earlier:
            return []
        line, value, _ = earlier[-1]
        for block in _blocks(self.body):
            at = [i for i, stmt in enumerate(block) if stmt.lineno == line]
            if at:
                following = [st for st in block[at[0] + 1 :] if st.lineno < before]
                return [[value, *way] for way in _growth(following, name)]
        return [[value]]

    def list_items(self, name: str, before: int) -> list[ast.expr]:
        """A list built as `parts = [...]` and then `parts.append(x)` / `parts.extend([...])`
        in the same block before line `before`: the items always present (an append under
        an `if` is optional, so left out)."""
        for block in _blocks(self.body):
            items: list[ast.expr] | None = None
            for stmt in block:
                if stmt.lineno >= before:
                    break
                if _assigns_list(stmt, name):
                    items = list(stmt.value.elts)  # type: ignore[attr-defined]
                elif items is not None:
                    items += _list_growth(stmt, name)
            if items is not None:
                return items
        return []


def _adds_to(stmts: list[ast.stmt], name: str) -> bool:
    return any(
        isinstance(node, ast.AugAssign) and ast.unparse(node.target) == name
        for stmt in stmts
        for node in ast.walk(stmt)
    )


def _growth(stmts: list[ast.stmt], name: str) -> list[list[ast.expr]]:
    """The ways `name += ...` can add along `stmts` (at most 8)."""
    ways: list[list[ast.expr]] = [[]]
    for stmt in stmts:
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add):
            if ast.unparse(stmt.target) == name:
                ways = [[*way, stmt.value] for way in ways]
        elif isinstance(stmt, ast.If) and _adds_to(stmt.orelse, name):
            branches = _growth(stmt.body, name) + _growth(stmt.orelse, name)
            ways = [[*way, *branch] for way in ways for branch in branches][:8]
    return ways


def _blocks(body: ast.AST) -> list[list[ast.stmt]]:
    return [
        getattr(node, attr)
        for node in ast.walk(body)
        for attr in ("body", "orelse", "finalbody")
        if isinstance(getattr(node, attr, None), list)
        and getattr(node, attr)
        and isinstance(getattr(node, attr)[0], ast.stmt)
    ]


def _assigns_list(stmt: ast.stmt, name: str) -> bool:
    return (
        isinstance(stmt, ast.Assign)
        and [ast.unparse(t) for t in stmt.targets] == [name]
        and isinstance(stmt.value, ast.List)
    )


def _list_growth(stmt: ast.stmt, name: str) -> list[ast.expr]:
    """The items `name.append(x)` or `name.extend([...])` adds, if `stmt` is one."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return []
    func, args = stmt.value.func, stmt.value.args
    if not (isinstance(func, ast.Attribute) and ast.unparse(func.value) == name and args):
        return []
    if func.attr == "append":
        return [args[0]]
    if func.attr == "extend" and isinstance(args[0], ast.List | ast.Tuple):
        return list(args[0].elts)
    return []

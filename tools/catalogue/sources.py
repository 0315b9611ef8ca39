"""Messages of an engine's source tree: logger calls and raised errors, read with `ast`.

A message is kept as a `str.format` template whose placeholders are all `{}` (literal
braces doubled), with the expression and format spec behind each placeholder, so a sample
line can be built from it. f-strings, %-style logger arguments, `"..." % (...)`,
`"...".format(...)`, `+` concatenation and a local variable assembled before the call
(`msg = ...; msg += ...; logger.info(msg)`) are all reduced to that one form.
"""

from __future__ import annotations

import ast
import re
import string
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tools.catalogue.scope import Scope

# Logger methods and the level their lines carry.
LOGGER_LEVELS = {
    "debug": "DEBUG",
    "info": "INFO",
    "warning": "WARNING",
    "warn": "WARNING",
    "error": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
    "fatal": "CRITICAL",
}
# vLLM's module-level helpers that log once (0.4-0.6, before logger.warning_once).
ONCE_HELPERS = {"print_warning_once": "WARNING", "print_info_once": "INFO"}

# Text about the KV cache, memory, block/token pools, preemption and retraction, the
# queue and admission, and the limits that bound them. Matched on the literal parts only,
# lower-cased, so a variable's name in a placeholder never selects a message.
KEYWORDS = re.compile(
    r"\bkv|cache|block|memory|\bmem\b|mem_fraction|preempt|retract|queue|waiting|schedul"
    r"|\boom\b|out of memory|max_model_len|max model len|max seq len|max_seq_len"
    r"|max_num_seqs|max_num_batched|max_running_requests|max_total_num_tokens"
    r"|gpu_memory_utilization|token usage|context length|context_len|swap|evict"
    r"|\bpool\b|concurrency|admission|admit|reject|capacity|\bgib\b|\bgb\b"
)

# Code that never runs in an LLM server's process, or whose errors are programming
# mistakes rather than states of the pool: left out of the catalogue.
EXCLUDED_PATHS = re.compile(
    r"/tests?/|benchmark|/bench_|^sglang/(?:multimodal_gen|lang|kernels|test)/|/examples?/"
)
INTERNAL_ERRORS = frozenset(
    (
        "AssertionError",
        "AttributeError",
        "ImportError",
        "IndexError",
        "KeyError",
        "ModuleNotFoundError",
        "NotImplementedError",
        "TypeError",
    )
)

_PERCENT = re.compile(
    r"%(?:\((?P<key>\w+)\))?[#0\- +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?"
    r"(?P<conv>[diouxXeEfFgGcrsa%])"
)


@dataclass(frozen=True, slots=True)
class Placeholder:
    """What fills one `{}`: the source expression and its format spec (f-string, % or .format)."""

    expr: str
    spec: str


@dataclass(frozen=True, slots=True)
class Template:
    """A message as a `str.format` template with positional `{}` placeholders."""

    text: str
    holes: tuple[Placeholder, ...]

    def __add__(self, other: Template) -> Template:
        return Template(self.text + other.text, self.holes + other.holes)

    @property
    def literal(self) -> str:
        """The fixed text: the template without its placeholders, braces unescaped."""
        return self.text.replace("{}", "").replace("{{", "{").replace("}}", "}")


@dataclass(frozen=True, slots=True)
class Message:
    """One message site in one release's tree."""

    template: Template
    level: str  # DEBUG..CRITICAL for logger calls, "raise XError" for raised errors
    path: str  # relative to the tree root, e.g. vllm/worker/cpu_worker.py
    line: int


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _hole(node: ast.expr, spec: str = "") -> Template:
    return Template("{}", (Placeholder(ast.unparse(node), spec),))


def _spec_text(spec: ast.expr | None) -> str:
    if isinstance(spec, ast.JoinedStr):
        return "".join(str(v.value) for v in spec.values if isinstance(v, ast.Constant))
    return ""


def _joined(node: ast.JoinedStr) -> Template:
    out = Template("", ())
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            out += Template(_escape(value.value), ())
        elif isinstance(value, ast.FormattedValue):
            out += _hole(value.value, _spec_text(value.format_spec))
    return out


_TOKENS = re.compile(r"\{\{|\}\}|\{\}|" + _PERCENT.pattern)


def _percent(template: Template, args: list[ast.expr]) -> Template:
    """A template whose text holds %-conversions, with their arguments: each conversion
    becomes a `{}`, in order among the placeholders the template already has."""
    out, holes, pos = [], [], 0
    old, new = iter(template.holes), iter(args)
    for match in _TOKENS.finditer(template.text):
        out.append(template.text[pos : match.start()])
        pos = match.end()
        token = match[0]
        if token in ("{{", "}}"):
            out.append(token)
        elif token == "{}":
            out.append(token)
            holes.append(next(old, Placeholder("", "")))
        elif match["conv"] == "%":
            out.append("%")
        else:
            expr = next(new, None)
            name = ast.unparse(expr) if expr is not None else (match["key"] or "")
            key = match["key"]
            holes.append(Placeholder(name, token.replace(f"({key})", "") if key else token))
            out.append("{}")
    out.append(template.text[pos:])
    return Template("".join(out), tuple(holes))


def _format_call(text: str, args: list[ast.expr], kwargs: dict[str, ast.expr]) -> Template:
    """`"...".format(...)`: each replacement field becomes a `{}`."""
    out: list[str] = []
    holes: list[Placeholder] = []
    auto = 0
    for literal, field, spec, _conv in string.Formatter().parse(text):
        out.append(_escape(literal))
        if field is None:
            continue
        if field == "":
            field, auto = str(auto), auto + 1
        head = re.split(r"[.\[]", field, maxsplit=1)[0]
        node = args[int(head)] if head.isdigit() and int(head) < len(args) else kwargs.get(head)
        holes.append(Placeholder(ast.unparse(node) if node is not None else field, spec or ""))
        out.append("{}")
    return Template("".join(out), tuple(holes))


def _tuple_items(node: ast.expr) -> list[ast.expr]:
    return list(node.elts) if isinstance(node, ast.Tuple) else [node]


def _is_str(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_strlike(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        return _is_strlike(node.left) or _is_strlike(node.right)
    if isinstance(node, ast.IfExp):
        return _is_strlike(node.body) or _is_strlike(node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("format", "join") and _is_strlike(node.func.value)
    return isinstance(node, ast.JoinedStr)


def templates(node: ast.expr, scope: Scope | None, line: int) -> list[Template]:
    """Every template a message expression can produce (an `x if c else y` gives two)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [Template(_escape(node.value), ())]
    if isinstance(node, ast.JoinedStr):
        return [_joined(node)]
    if isinstance(node, ast.IfExp):
        return templates(node.body, scope, line) + templates(node.orelse, scope, line)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_str(node.left):
        left = Template(_escape(str(node.left.value)), ())  # type: ignore[attr-defined]
        return [_percent(left, _tuple_items(node.right))]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        # Either side may be a local built earlier (`msg_prefix + msg_details`).
        lefts = templates(node.left, scope, line)
        rights = templates(node.right, scope, line)
        if lefts or rights or _is_strlike(node):
            lefts, rights = lefts or [_hole(node.left)], rights or [_hole(node.right)]
            return [a + b for a in lefts for b in rights][:8]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        owner = node.func.value
        if node.func.attr == "format" and isinstance(owner, ast.Constant):
            kwargs = {k.arg: k.value for k in node.keywords if k.arg}
            return [_format_call(str(owner.value), list(node.args), kwargs)]
        if node.func.attr == "join" and isinstance(owner, ast.Constant) and len(node.args) == 1:
            return _joined_list(str(owner.value), node.args[0], scope, line)
    if isinstance(node, ast.Name) and scope is not None:
        found: list[Template] = []
        for parts in scope.value_of(node.id, line):
            if not _is_strlike(parts[0]):
                continue
            out = [Template("", ())]
            for part in parts:
                pieces = templates(part, None, line) or [_hole(part)]
                out = [a + b for a in out for b in pieces][:8]
            found += out
        return found[:8]
    return []


def _joined_list(sep: str, items: ast.expr, scope: Scope | None, line: int) -> list[Template]:
    """`sep.join([...])`, or `sep.join(parts)` with `parts` built in the function."""
    if isinstance(items, ast.List | ast.Tuple):
        elements = list(items.elts)
    elif isinstance(items, ast.Name) and scope is not None:
        elements = scope.list_items(items.id, line)
    else:
        return []
    if not elements:
        return []
    out = Template("", ())
    for i, element in enumerate(elements):
        pieces = templates(element, None, line)
        out += Template(_escape(sep) if i else "", ()) + (pieces[0] if pieces else _hole(element))
    return [out]


def _logger_level(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return ONCE_HELPERS.get(func.id)
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value
    owner_name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
    if "logger" not in owner_name.lower() and owner_name != "logging":
        return None
    return LOGGER_LEVELS.get(func.attr.removesuffix("_once"))


def _error_name(node: ast.expr | None) -> str | None:
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    if name in INTERNAL_ERRORS or not name.endswith(("Error", "Exception")):
        return None
    return name


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, tree: ast.Module) -> None:
        self.path = path
        self.scopes = [Scope(tree)]
        self.found: list[Message] = []

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scopes.append(Scope(node))
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def _level(self, func: ast.expr, line: int) -> str | None:
        """The call's level: a logger method, or a local bound to one
        (`log_fn = logger.info if ... else logger.debug`: the higher level prints)."""
        level = _logger_level(func)
        if level is not None or not isinstance(func, ast.Name) or "log" not in func.id:
            return level
        bound = self.scopes[-1].value_of(func.id, line)
        if not bound:
            return None
        value = bound[0][0]
        options = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
        levels = [lv for lv in map(_logger_level, options) if lv is not None]
        ranked = list(LOGGER_LEVELS.values())
        return max(levels, key=ranked.index) if levels else None

    def visit_Call(self, node: ast.Call) -> None:
        level = self._level(node.func, node.lineno)
        if level is not None and node.args:
            first, rest = node.args[0], node.args[1:]
            found = templates(first, self.scopes[-1], node.lineno)
            if rest:  # logging's own %-formatting
                found = [_percent(t, rest) for t in found]
            self._keep(found, level, node.lineno)
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        name = _error_name(node.exc)
        if name is not None and isinstance(node.exc, ast.Call):
            found = templates(node.exc.args[0], self.scopes[-1], node.lineno)
            self._keep(found, f"raise {name}", node.lineno)
        self.generic_visit(node)

    def _keep(self, found: list[Template], level: str, line: int) -> None:
        for template in found:
            if template.literal.strip() and KEYWORDS.search(template.literal.lower()):
                self.found.append(Message(template, level, self.path, line))


def messages_of_file(path: Path, rel: str) -> list[Message]:
    """The capacity-relevant messages of one source file (SyntaxError propagates)."""
    text = path.read_text(encoding="utf-8-sig", errors="replace")
    with warnings.catch_warnings():  # invalid escapes in the engines' regexes
        warnings.simplefilter("ignore", SyntaxWarning)
        tree = ast.parse(text, filename=rel)
    visitor = _Visitor(rel, tree)
    visitor.visit(tree)
    return visitor.found


def package_files(root: Path, package: str) -> Iterator[tuple[Path, str]]:
    """The package's .py files under a release tree, with paths relative to the tree."""
    base = next((p for p in (root / package, root / "python" / package) if p.is_dir()), None)
    if base is None:
        raise FileNotFoundError(f"no {package}/ package directory under {root}")
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base.parent).as_posix()
        if not EXCLUDED_PATHS.search(rel):
            yield path, rel

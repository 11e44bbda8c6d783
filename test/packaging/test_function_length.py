"""No function in edge_spec_ros/ is longer than ``MAX_LINES`` lines: functions, methods, nested
functions and coroutines, from the ``def`` line to the last line of the body (decorators not counted).

A longer one fails here with its file, line, name and length, unless ``EXCEPTIONS`` names it with a
reason. The exceptions can only shrink: one that no longer matches a function over the bound (split,
renamed or removed) fails too, so its entry goes when the function is short.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "edge_spec_ros"
MAX_LINES = 60

# (path under edge_spec_ros/, an fnmatch pattern so that a module may move, e.g. "*scheduler.py"; qualified
# name) -> why the function stays long for now. Each entry matches exactly one function over the bound.
EXCEPTIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Function:
    """A function of the package: where it starts and how many lines it spans."""

    path: str  # relative to edge_spec_ros/, with '/'
    qualname: str  # enclosing classes and functions joined by '.'
    line: int
    length: int

    def __str__(self) -> str:
        return f"edge_spec_ros/{self.path}:{self.line} {self.qualname}: {self.length} lines"


def functions_in(tree: ast.AST, path: str, prefix: str = "") -> list[Function]:
    """Every function under ``tree``, nested ones included, with its qualified name."""
    found = []
    for node in ast.iter_child_nodes(tree):
        name = prefix
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append(Function(path, name, node.lineno, node.end_lineno - node.lineno + 1))
        found += functions_in(node, path, f"{name}." if name != prefix else prefix)
    return found


def package_functions() -> list[Function]:
    found = []
    for file in sorted(PACKAGE.rglob("*.py")):
        path = file.relative_to(PACKAGE).as_posix()
        found += functions_in(ast.parse(file.read_text(), str(file)), path)
    return found


def excused_by(function: Function, exceptions: dict[tuple[str, str], str]) -> list[tuple[str, str]]:
    return [(pattern, qualname) for pattern, qualname in exceptions
            if qualname == function.qualname and fnmatchcase(function.path, pattern)]


def violations(functions: list[Function], exceptions: dict[tuple[str, str], str],
               max_lines: int = MAX_LINES) -> list[str]:
    """What breaks the rule: functions over ``max_lines`` without an exception, and exceptions without a
    reason or that match no such function (stale) or more than one."""
    long = [f for f in functions if f.length > max_lines]
    problems = [f"{f} (over {max_lines}): split it into short helpers" for f in long if not excused_by(f, exceptions)]
    for key, reason in exceptions.items():
        if not reason.strip():
            problems.append(f"exception {key} gives no reason")
        matched = [f for f in long if key in excused_by(f, exceptions)]
        if not matched:
            problems.append(f"exception {key} ({reason}) matches no function over {max_lines} lines: remove it")
        elif len(matched) > 1:
            problems.append(f"exception {key} matches {len(matched)} functions ({'; '.join(map(str, matched))}): "
                            "name one")
    return problems


def test_no_function_is_longer_than_the_bound():
    problems = violations(package_functions(), EXCEPTIONS)
    assert not problems, "\n".join(problems)


def test_the_walk_finds_methods_nested_functions_and_coroutines():
    source = ("class A:\n    def m(self):\n        def inner():\n            pass\n"
              "async def c():\n    pass\n@decorated\ndef d():\n    pass\n")
    found = {f.qualname: (f.line, f.length) for f in functions_in(ast.parse(source), "x.py")}
    assert found == {"A.m": (2, 3), "A.m.inner": (3, 2), "c": (5, 2), "d": (8, 2)}


def test_a_long_function_fails_and_a_stale_exception_fails():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1))
    long = functions_in(ast.parse(f"def f():\n{body}"), "a/b.py")
    assert [f.length for f in long] == [MAX_LINES]
    longer = functions_in(ast.parse(f"def f():\n{body}    y = 0\n"), "a/b.py")
    assert violations(long, {}) == [] and len(violations(longer, {})) == 1
    assert f"a/b.py:1 f: {MAX_LINES + 1} lines" in violations(longer, {})[0]
    assert violations(longer, {("a/*.py", "f"): "reason"}) == []
    assert violations(longer, {("a/*.py", "f"): " "}) == ["exception ('a/*.py', 'f') gives no reason"]
    assert "matches no function" in violations(long, {("a/*.py", "f"): "reason"})[0]
    assert [p.split(":")[0] for p in violations(longer, {("c/*.py", "f"): "reason"})] == [
        "edge_spec_ros/a/b.py", f"exception ('c/*.py', 'f') (reason) matches no function over {MAX_LINES} lines"]
    two = longer + [Function("a/c.py", "f", 1, MAX_LINES + 1)]
    assert "matches 2 functions" in violations(two, {("a/*.py", "f"): "reason"})[0]

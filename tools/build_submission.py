"""Builds submission.py, the one file the leaderboard takes, from the nvfp4_gemm package.

    python tools/build_submission.py            writes submission.py
    python tools/build_submission.py --check    exits 1 when submission.py is not a fresh build

Amalgamation as SQLite ships one file: the modules in a fixed order (nvfp4_gemm/__init__.py
lists it, lowest layer first; OUTSIDE_MODULES are left out), each between begin / end markers; the imports of outside
modules lifted to the top, once each; the package's own imports dropped, so that every name
is a global of the one file (the package imports names, never modules, to allow that); the
`#!POPCORN` lines first; the package's docstring as the file's. The build fails on a
top-level name defined in two modules, on a package import that renames (`as`) or imports
a module, and on an outside import inside a function's reach that would need the package.

The file is stamped with a digest of the package's sources (a file cannot name the commit
that contains it). The CuTe DSL reads kernel source from the file it runs, and the
leaderboard runs the file as it is: it is committed, and tests/test_build.py fails when it
differs from a fresh build.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "nvfp4_gemm"
MODULES = ("common", "formats", "ptx", "inputs", "schedule", "caches", "binding", "watchdog", "decoder",
           "torch_paths", "kernel_runner", "sm100", "sm90_config", "sm90", "dispatch")
# Package modules the built file leaves out: the torch custom op for mixture-of-experts
# layers (nvfp4_gemm/moe.py) and the masked kernels (sm90_masked.py, sm100_masked.py, over the
# host math of masked_plan.py and the runners' shared host side, masked_runner.py) work on the caller's CUDA queues, which the leaderboard's
# word filter refuses to see named, and the leaderboard calls custom_kernel alone.
OUTSIDE_MODULES = ("moe", "masked_plan", "masked_runner", "plan_device", "sm90_masked", "sm100_masked", "graph_pools")
POPCORN_LINES = ("#!POPCORN leaderboard nvfp4_group_gemm", "#!POPCORN gpu B200")
RULER = "# " + "=" * 96


class BuildError(Exception):
    pass


def _is_package_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == PACKAGE
    return isinstance(node, ast.Import) and any(a.name.split(".")[0] == PACKAGE for a in node.names)


def _top_level_names(node: ast.stmt) -> list[str]:
    """Names a plain top-level statement binds (a def, a class, an assignment)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def split_module(name: str, source: str) -> tuple[list[ast.stmt], str, list[str]]:
    """(its outside imports, its body without docstring and imports, the names it binds).
    Fails on a package import of a module not above this one in MODULES (a cycle, or a
    layer out of order)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()  # 0-based line numbers
    imports, names = [], []
    below = MODULES[:MODULES.index(name)]
    for i, node in enumerate(tree.body):
        span = range(node.lineno - 1, node.end_lineno)
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            drop.update(span)  # the module docstring
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            drop.update(span)
            if _is_package_import(node):
                if isinstance(node, ast.Import) or any(a.asname or a.name == "*" for a in node.names):
                    raise BuildError(f"{PACKAGE}/{name}.py:{node.lineno}: import names from the package's "
                                     "modules without renaming them (the built file has one namespace)")
                source_module = (node.module or "").split(".")[-1]
                if source_module not in below:
                    raise BuildError(f"{PACKAGE}/{name}.py:{node.lineno}: imports from {source_module}, which "
                                     f"is not above {name} in the module order")
            elif not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
                imports.append(node)
        else:
            names.extend(_top_level_names(node))
    body = "".join(line for j, line in enumerate(lines) if j not in drop).strip("\n")
    for node in ast.walk(tree):  # a package import further down could not be dropped
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in tree.body and _is_package_import(node):
            raise BuildError(f"{PACKAGE}/{name}.py:{node.lineno}: a package import inside a block")
    return imports, body, names


def merged_imports(imports: list[ast.stmt]) -> list[str]:
    """The outside imports as lines, each module once: `import x` lines, then one
    `from m import a, b` line per module, sorted."""
    plain, froms = set(), {}
    for node in imports:
        if isinstance(node, ast.Import):
            plain.update(ast.unparse(ast.Import([a])) for a in node.names)
        else:
            froms.setdefault(node.module, set()).update(
                a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
    return sorted(plain) + [f"from {m} import {', '.join(sorted(names))}" for m, names in sorted(froms.items())]


def source_digest(root: Path = ROOT) -> str:
    h = hashlib.sha256()
    for name in ("__init__", *MODULES):
        h.update((root / PACKAGE / f"{name}.py").read_bytes())
    return h.hexdigest()[:16]


def build(root: Path = ROOT) -> str:
    pkg = root / PACKAGE
    doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text()), clean=False)
    lifted: list[ast.stmt] = []
    parts: list[str] = []
    home: dict[str, str] = {}
    for name in MODULES:
        source = (pkg / f"{name}.py").read_text()
        imports, body, names = split_module(name, source)
        for n in names:
            if n in home and home[n] != name:
                raise BuildError(f"'{n}' is defined at top level in both {PACKAGE}/{home[n]}.py and {PACKAGE}/{name}.py")
            home[n] = name
        lifted.extend(imports)
        summary = (ast.get_docstring(ast.parse(source)) or "").split("\n")[0]
        parts.append(f"{RULER}\n# begin {PACKAGE}/{name}.py: {summary}\n{RULER}\n{body}\n# end {PACKAGE}/{name}.py\n")
    header = "\n".join([
        *POPCORN_LINES,
        "# Generated by tools/build_submission.py from the nvfp4_gemm package: do not edit by hand.",
        f"# Package sources sha256 {source_digest(root)}; edit nvfp4_gemm/ and run the build.",
    ])
    return (f'{header}\n"""{doc}"""\n\nfrom __future__ import annotations\n\n'
            + "\n".join(merged_imports(lifted)) + "\n\n\n" + "\n\n\n".join(parts))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when submission.py is not a fresh build")
    parser.add_argument("--output", type=Path, default=ROOT / "submission.py")
    args = parser.parse_args(argv)
    try:
        text = build()
    except BuildError as e:
        print(f"build failed: {e}", file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is not the build of {PACKAGE}/: run python tools/build_submission.py",
                  file=sys.stderr)
            return 1
        print(f"{args.output} is a fresh build of {PACKAGE}/")
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output} ({len(text.encode())} bytes, {text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Control flow of a kernel's PTX, and a path-sensitive walk of it, for checks of what a
thread can still do after one of the watchdog's waits gave up.

    python tools/ptx_flow.py KERNEL.ptx [--site ID ...]   what each give-up path reaches

The PTX is the DSL's dump (CUTE_DSL_KEEP=ptx). `ptx_cfg` gives its statements and their
successors (an inline-asm block's labels are local to its braces). `walk` runs the kernel
symbolically from its entry: registers hold constants where the code moved an immediate
into them, predicates where a comparison of known values set them, a register is known
nonzero where an `or` took a nonzero operand (an OR over a barrier merged with a lane
test, whose comparison with 0 is then known), and a register compared for equality with
an immediate holds that value on the branch where the comparison held (the role branches
on the warp index are how a thread's path stays in its own role). Every other register is unknown, and a branch on an unknown predicate goes both
ways. A path enters the phase after a give-up at the give-up label (`WD_GIVEUP`) of a wait
of the chosen sites, with that wait's result register 0, and from then on the CTA's abort
flag (the one `ld.volatile.shared.u32 R, [B]` form, watchdog.load_abort_flag and the
waits' own reads) reads 1. What a path reaches after its give-up is what the thread may
still do once that wait failed.

The walk over-approximates: an instruction it cannot evaluate makes its destinations
unknown, so a check that no path reaches an instruction holds for the real kernel; one
that fails names a path, which may be infeasible (then teach the walk, do not loosen the
check).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path


def ptx_instructions(text: str) -> list[tuple[str, str]]:
    """The first function's body as (label or '', statement) in order, labels made unique
    per brace scope (an inline-asm block's labels are local to its braces: the watchdog's
    waits all use the same names). A statement is 'scope/scope/... code', its chain of
    enclosing brace scopes first."""
    body = text[text.index("{", text.index(".entry")) + 1:]
    out, scopes, counter = [], [0], 0
    declared: dict[int, set] = {0: set()}  # a scope's own register names (an asm block's)
    for raw in body.splitlines():
        line = re.sub(r"//.*", "", raw).strip()
        if not line:
            continue
        if line == "{":
            counter += 1
            scopes.append(counter)
            declared[counter] = set()
            continue
        if line == "}":
            scopes.pop()
            if not scopes:
                break
            continue
        m = re.match(r"^([$\w]+):$", line)
        if m:
            out.append((f"{scopes[-1]}:{m.group(1)}", ""))
            continue
        d = re.match(r"^\.reg\s+\.\w+\s+(.*);$", line)
        if d and scopes[-1] != 0:
            declared[scopes[-1]] |= {n.strip() for n in d.group(1).split(",")}
            continue
        # a block's own registers are its alone: name them after their scope
        for sc in reversed(scopes[1:]):
            for name in declared[sc]:
                line = re.sub(rf"(?<![%.\w]){re.escape(name)}(?![\w])", f"{name}@{sc}", line)
        out.append(("", f"{'/'.join(map(str, scopes))} {line}"))
    return out


BRANCH = re.compile(r"^(@!?%?[\w@]+\s+)?bra(\.uni)?\s+([$\w]+);")
END = re.compile(r"^(@!?%?[\w@]+\s+)?(ret|exit|trap)\b")


def ptx_cfg(text: str):
    """(statements, successors) of the first function: a branch goes to the label of that
    name in the innermost enclosing scope; ret, exit and trap end a path."""
    items = ptx_instructions(text)
    where = {label: i for i, (label, _) in enumerate(items) if label}
    succ = []
    for i, (label, stmt) in enumerate(items):
        nxt = [i + 1] if i + 1 < len(items) else []
        if label:
            succ.append(nxt)
            continue
        chain, code = stmt.split(" ", 1)
        m = BRANCH.match(code)
        if m:
            scopes = chain.split("/")
            target = next((where[f"{s}:{m.group(3)}"] for s in reversed(scopes) if f"{s}:{m.group(3)}" in where), None)
            targets = [] if target is None else [target]
            succ.append(targets + (nxt if m.group(1) else []))
        elif END.match(code):
            succ.append(nxt if code.startswith("@") else [])
        else:
            succ.append(nxt)
    return items, succ


def code_of(stmt: str) -> str:
    return stmt.split(" ", 1)[1] if stmt else ""


def scope_of(stmt: str) -> str:
    return stmt.split(" ", 1)[0].split("/")[-1] if stmt else ""


@dataclasses.dataclass(frozen=True)
class Wait:
    """One of the watchdog's waits in the PTX: its inline-asm scope, its site id (the note's
    `or.b32 x, x, SITE`), the index of its give-up label, its result register (the one the
    give-up path zeroes) and whether it reads the abort flag (a wait the flag cuts short)."""

    scope: str
    site: int
    giveup: int
    result: str
    reads_abort: bool
    timeout: int  # the index of its WD_TIMEOUT label


ABORT_READ = re.compile(r"^ld\.volatile\.shared\.u32\s+([%\w@]+),\s*\[([%\w]+)\];$")


def find_waits(items) -> list[Wait]:
    by_scope: dict[str, list[int]] = {}
    for i, (label, stmt) in enumerate(items):
        by_scope.setdefault(label.split(":")[0] if label else scope_of(stmt), []).append(i)
    waits = []
    for scope, idx in by_scope.items():
        labels = {items[i][0].split(":")[1]: i for i in idx if items[i][0]}
        if "WD_GIVEUP" not in labels:
            continue
        codes = [code_of(items[i][1]) for i in idx if not items[i][0]]
        site = next(int(m.group(1)) for c in codes if (m := re.match(r"or\.b32 x[@\d]*, x[@\d]*, (\d+);", c)))
        g = labels["WD_GIVEUP"]
        result = re.match(r"mov\.u32 ([%\w]+), 0;", code_of(items[g + 1][1])).group(1)
        reads_abort = any(ABORT_READ.match(c) for c in codes)
        waits.append(Wait(scope, site, g, result, reads_abort, labels["WD_TIMEOUT"]))
    return waits


# ------------------------------------------------------------------ the symbolic walk
IMM = re.compile(r"^-?(0[xX][0-9a-fA-F]+|\d+)$")
REG = re.compile(r"%?[A-Za-z_$][\w$]*(@\d+)?")
# special registers whose value changes between reads (a copy of one is no copy)
VOLATILE_SPECIAL = ("%globaltimer", "%clock")
CMP = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "lo": lambda a, b: a < b, "ls": lambda a, b: a <= b,
    "hi": lambda a, b: a > b, "hs": lambda a, b: a >= b,
}


def split_operands(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def parse(code: str):
    """(guard register, guard negated, opcode, operands) of a statement."""
    guard, neg = None, False
    m = re.match(r"^@(!?)(%?[\w@]+)\s+(.*)$", code)
    if m:
        neg, guard, code = m.group(1) == "!", m.group(2), m.group(3)
    code = code.rstrip(";").strip()
    op, _, rest = code.partition(" ")
    if "\t" in op:
        op, _, more = op.partition("\t")
        rest = more + " " + rest
    return guard, neg, op.strip(), split_operands(rest.strip())


def _value(operand: str, env: dict):
    """The operand's constant, or None."""
    if IMM.match(operand):
        return int(operand, 0)
    v = None if operand.startswith("?") else env.get(operand)
    return v if isinstance(v, int) else None


def _root(operand: str, env: dict) -> str:
    """The register whose value `operand` holds (a copy's source), or operand itself."""
    v = env.get(operand)
    return v[1] if isinstance(v, tuple) and v[0] == "=" else operand


NONZERO = ("nz",)  # a register known to be nonzero, of unknown value


def _nonzero(operand: str, env: dict) -> bool:
    v = _value(operand, env)
    return (v is not None and v != 0) or (not IMM.match(operand) and env.get(operand) == NONZERO)


def _compare(cmp: str, a: str, b: str, env: dict):
    """The comparison's truth where both sides are known, are the same register, or one
    is known nonzero and the other is 0 (for eq and ne)."""
    x, y = _value(a, env), _value(b, env)
    if x is not None and y is not None and cmp in CMP:
        return int(CMP[cmp](x, y))
    if cmp in ("eq", "ne") and ((x == 0 and _nonzero(b, env)) or (y == 0 and _nonzero(a, env))):
        return int(cmp == "ne")
    if REG.fullmatch(a) and REG.fullmatch(b) and _root(a, env) == _root(b, env):
        return int(cmp in ("eq", "le", "ge", "ls", "hs"))
    return None


def _dests(op: str, operands: list[str]) -> list[str]:
    """Registers an instruction may write: those of its first operand unless that is a
    memory operand or the instruction writes no register (over-approximated: an input
    register named first is only made unknown)."""
    if not operands or operands[0].startswith("["):
        return []
    if op.startswith(("bar.red", "barrier.red")):  # a reduction's result
        pass
    elif op.startswith(("st.", "red.", "bar", "fence", "membar", "prefetch", "griddepcontrol", "nanosleep")):
        return []
    return [m.group(0) for m in REG.finditer(operands[0]) if not IMM.match(m.group(0))]


@dataclasses.dataclass
class Step:
    """What the walk hands the check at each statement reached: its index, the path's
    phase (None before a give-up, else the give-up's Wait) and the path that led there."""

    index: int
    phase: Wait | None
    path: tuple
    executes: bool = True  # False where its guard predicate is known false


def live_registers(items, succ) -> list[frozenset]:
    """The registers live at each statement (read on some path before being written), by
    the usual backward fixpoint. The walk keeps only these: a constant no later statement
    reads would only multiply its states. A register named first is taken as written
    (_dests), which may drop a value early; that only makes the walk less sure."""
    uses, defs = [], []
    for label, stmt in items:
        if label:
            uses.append(frozenset())
            defs.append(frozenset())
            continue
        guard, _, op, ops = parse(code_of(stmt))
        d = set(_dests(op, ops))
        u = {m.group(0) for o in ops for m in REG.finditer(o) if not IMM.match(m.group(0))} - d
        if guard:
            u.add(guard)
        if op.startswith("setp") and ops:  # the written predicate is not read
            u -= {m.group(0) for m in REG.finditer(ops[0])}
        uses.append(frozenset(u))
        defs.append(frozenset(d))
    live = [frozenset()] * len(items)
    changed = True
    while changed:
        changed = False
        for i in range(len(items) - 1, -1, -1):
            out = frozenset().union(*(live[j] for j in succ[i])) if succ[i] else frozenset()
            new = uses[i] | (out - defs[i])
            if new != live[i]:
                live[i] = new
                changed = True
    return live


def branch_registers(items) -> frozenset:
    """The registers a branch decision can depend on: the branches' predicates, the
    predicates of guarded instructions, and, flow-insensitively, every register an
    instruction reads to write one of these. The walk tracks no other register: a value
    that decides no branch only multiplies its states."""
    parsed = []
    wanted: set[str] = set()
    for label, stmt in items:
        if label:
            continue
        guard, _, op, ops = parse(code_of(stmt))
        if guard:
            wanted.add(guard)
        parsed.append((op, ops, set(_dests(op, ops))))
    changed = True
    while changed:
        changed = False
        for op, ops, dests in parsed:
            if dests & wanted:
                srcs = {m.group(0) for o in ops[1:] for m in REG.finditer(o) if not IMM.match(m.group(0))}
                if op.startswith("setp") and "|" in ops[0]:
                    srcs |= dests
                new = srcs - wanted
                if new:
                    wanted |= new
                    changed = True
    return frozenset(wanted)


def walk(items, succ, waits: Iterable[Wait], visit: Callable[[Step], bool], max_states: int = 2_000_000) -> None:
    """Runs every path of the kernel from its entry (see the module docstring). `waits`:
    the waits whose give-up enters the after phase. visit(step) is called at each
    statement reached; it returns False to stop that path there."""
    entering = {w.giveup: w for w in waits}
    relevant = branch_registers(items)
    live = [regs & relevant for regs in live_registers(items, succ)]
    start = (0, (), None)
    seen = {start}
    todo = [(start, ())]
    states = 0
    while todo:
        (i, env_items, phase), path = todo.pop()
        states += 1
        if states > max_states:
            raise RuntimeError(f"the walk passed {max_states} states")
        env = dict(env_items)
        if i in entering and phase is None:
            phase = entering[i]
            env[phase.result] = 0
        path = path + (i,) if len(path) < 40 else path[1:] + (i,)
        guard = parse(code_of(items[i][1]))[:2] if not items[i][0] else (None, False)
        g = None if guard[0] is None else _value(guard[0], env)
        if not visit(Step(i, phase, path, g is None or bool(g) != guard[1])):
            continue
        for j, env2 in _successors(items, succ, i, env, phase is not None):
            keep = live[j] | ({entering[j].result} if j in entering else set())
            env2 = {k: v for k, v in env2.items() if k.lstrip("?") in keep}
            key = (j, tuple(sorted(env2.items())), phase)
            if key not in seen:
                seen.add(key)
                todo.append((key, path))


def _successors(items, succ, i, env: dict, aborted: bool):
    label, stmt = items[i]
    if label:
        return [(j, env) for j in succ[i]]
    guard, neg, op, ops = parse(code_of(stmt))
    known = None
    if guard is not None:
        g = _value(guard, env)
        if g is not None:
            known = bool(g) != neg
    if op.startswith("bra"):
        target, fall = (succ[i][0], succ[i][1:]) if succ[i] else (None, [])
        if guard is None:
            return [(target, env)] if target is not None else []
        out = []
        if known in (True, None) and target is not None:
            out.append((target, _refine(env, guard, not neg)))
        if known in (False, None):
            out += [(j, _refine(env, guard, neg)) for j in fall]
        return out
    if END.match(code_of(stmt)):
        return [] if known is not False and guard is None else [(j, env) for j in succ[i]]
    if known is False:
        return [(j, env) for j in succ[i]]
    new = dict(env)
    _execute(new, op, ops, aborted, certain=known is True or guard is None)
    return [(j, new) for j in succ[i]]


def _refine(env: dict, pred: str, holds: bool) -> dict:
    """env on the branch where `pred` is `holds`: the predicate known, a register it
    compared for (in)equality with an immediate known where that comparison is exact,
    and the operands of an or (false), and (true) or not that made it, in turn."""
    out = dict(env)
    todo = [(pred, holds)]
    while todo:
        p, h = todo.pop()
        out[p] = 1 if h else 0
        d = env.get("?" + p)
        if d is None:
            continue
        if d[0] == "or" and not h:
            todo += [(d[1], False), (d[2], False)]
        elif d[0] == "and" and h:
            todo += [(d[1], True), (d[2], True)]
        elif d[0] == "not":
            todo.append((d[1], not h))
        elif d[0] not in ("or", "and", "not"):
            reg, cmp, imm = d
            if (cmp == "eq" and h) or (cmp == "ne" and not h):
                out[reg] = imm
    return out


def _forget(env: dict, reg: str) -> None:
    env.pop(reg, None)
    env.pop("?" + reg, None)
    for key in [k for k, v in env.items() if isinstance(v, tuple) and reg in v]:
        env.pop(key)


def _execute(env: dict, op: str, ops: list[str], aborted: bool, certain: bool) -> None:
    base = op.split(".")[0]
    dests = _dests(op, ops)
    value, defn = None, None
    copy, nonzero = None, False
    if base == "mov" and len(ops) == 2:
        value = _value(ops[1], env)
        copy = ops[1]
    elif base == "setp" and len(ops) == 3 and "|" not in ops[0]:
        cmp = op.split(".")[1]
        a, b = _value(ops[1], env), _value(ops[2], env)
        value = _compare(cmp, ops[1], ops[2], env)
        if value is None and a is None and b is not None and cmp in ("eq", "ne") and REG.fullmatch(ops[1]):
            defn = (ops[1], cmp, b)
    elif base == "selp" and len(ops) == 4:
        p = _value(ops[3], env)
        if p is not None:
            value = _value(ops[1] if p else ops[2], env)
            copy = ops[1] if p else ops[2]
        elif _value(ops[1], env) is not None and _value(ops[1], env) == _value(ops[2], env):
            value = _value(ops[1], env)
    elif base in ("and", "or", "xor") and len(ops) == 3:
        a, b = _value(ops[1], env), _value(ops[2], env)
        if a is not None and b is not None:
            value = {"and": a & b, "or": a | b, "xor": a ^ b}[base]
        elif base == "and" and 0 in (a, b):
            value = 0
        elif op.endswith(".pred") and base == "and" and 0 in (a, b):
            value = 0
        elif op.endswith(".pred") and base == "or" and 1 in (a, b):
            value = 1
        elif op.endswith(".pred") and base in ("and", "or") and all(REG.fullmatch(o) for o in ops[1:]):
            defn = (base, ops[1], ops[2])
        elif base == "or" and (_nonzero(ops[1], env) or _nonzero(ops[2], env)):
            nonzero = True  # a set bit stays set (e.g. a barrier's OR merged with a lane test)
    elif op.startswith(("bar.red.or.pred", "barrier.red.or.pred")) and len(ops) == 4:
        # the OR over the barrier's threads: 1 where this thread's own input is
        value = 1 if _value(ops[3], env) == 1 else None
    elif op.startswith(("bar.red.and.pred", "barrier.red.and.pred")) and len(ops) == 4:
        value = 0 if _value(ops[3], env) == 0 else None
    elif base == "not" and len(ops) == 2 and op.endswith(".pred"):
        a = _value(ops[1], env)
        value = None if a is None else int(not a)
        if value is None and REG.fullmatch(ops[1]):
            defn = ("not", ops[1])
    elif aborted and op == "ld.volatile.shared.u32" and len(ops) == 2 and re.fullmatch(r"\[[%\w]+\]", ops[1]):
        value = 1  # the CTA's abort flag, set once a wait of it gave up
    if copy is not None and (IMM.match(copy) or not REG.fullmatch(copy) or copy in dests
                             or copy.startswith(VOLATILE_SPECIAL)):
        copy = None
    root = None if copy is None else _root(copy, env)
    for d in dests:
        _forget(env, d)
    if certain and len(dests) == 1:
        if value is not None:
            env[dests[0]] = value
        elif defn is not None:
            env["?" + dests[0]] = defn
        elif nonzero:
            env[dests[0]] = NONZERO
        elif root is not None and root != dests[0]:
            env[dests[0]] = ("=", root)


# ------------------------------------------------------------------ checks
def reached_after(text: str, sites: Iterable[int], pattern: str, until: str | None = None) -> list[tuple]:
    """Paths (their last statements) on which a give-up of a wait of `sites` is followed by
    a statement matching `pattern` (before one matching `until`, where given); [] where
    none is."""
    items, succ = ptx_cfg(text)
    waits = [w for w in find_waits(items) if w.site in set(sites)]
    if not waits:
        raise ValueError(f"no wait of sites {sorted(set(sites))} in the PTX")
    rx = re.compile(pattern)
    stop = None if until is None else re.compile(until)
    hits = []

    def visit(step: Step) -> bool:
        code = code_of(items[step.index][1])
        if step.phase is not None and step.executes and rx.search(code):
            hits.append(tuple(code_of(items[k][1]) or items[k][0] for k in step.path[-12:]))
            return False
        if step.phase is not None and stop is not None and stop.search(code):
            return False
        return len(hits) < 3

    walk(items, succ, waits, visit)
    return hits


def warp_registers(text: str) -> frozenset:
    """The registers that hold the warp's index: the thread's index / 32 (tid.x, or the
    linear index a mad of tid.z, tid.y and tid.x makes) and its broadcasts from lane 0 (the
    DSL's warp_idx, shfl.sync.idx from lane 0, once or more)."""
    tid = re.search(r"mov\.u32\s+(%r\d+),\s*%tid\.x;", text)
    if tid is None:
        return frozenset()
    linear = {tid.group(1)} | set(re.findall(rf"mad\.lo\.s32\s+(%r\d+),\s*%r\d+,\s*%r\d+,\s*{re.escape(tid.group(1))};", text))
    found = {m.group(1) for m in re.finditer(r"shr\.u32\s+(%r\d+),\s*(%r\d+),\s*5;", text) if m.group(2) in linear}
    while True:
        more = {m.group(1) for m in re.finditer(r"shfl\.sync\.idx\.b32\s+(%r\d+),\s*(%r\d+),\s*0,\s*31,\s*-1;", text)
                if m.group(2) in found} - found
        if not more:
            return frozenset(found)
        found |= more


def lane_registers(text: str) -> frozenset:
    """The registers that hold the thread's lane (mov.u32 %r, %laneid)."""
    return frozenset(re.findall(r"mov\.u32\s+(%r\d+),\s*%laneid;", text))


def _with(vals: tuple, n: int, new: frozenset) -> tuple:
    return vals[:n] + (new,) + vals[n + 1:]


def unavoidable(text: str, target: str, through: Callable[[int, str], bool],
                domains: Iterable[tuple[frozenset, Iterable[int]]] = ()) -> list[tuple]:
    """Paths from the entry to a statement matching `target` that pass no statement for
    which through(index, code) holds; [] where every path passes one. Each of `domains`
    (registers holding one value, its possible values) narrows the paths followed: one
    whose branches on comparisons of those registers with immediates leave it no value is
    not (the warp index, whose role branches are otherwise independent of each other; a
    lane, to follow one lane of each warp)."""
    items, succ = ptx_cfg(text)
    rx = re.compile(target)
    domains = [(frozenset(r), frozenset(v)) for r, v in domains]
    owner = {r: n for n, (regs, _) in enumerate(domains) for r in regs}
    start = tuple(v for _, v in domains)
    hits, seen, todo = [], {(0, start, frozenset())}, [(0, (), start, {})]
    while todo and len(hits) < 3:
        i, path, vals, preds = todo.pop()
        label, stmt = items[i]
        code = code_of(stmt)
        path = (path + (code or label,))[-12:]
        if code and through(i, code):
            continue
        if code and rx.search(code):
            hits.append(path)
            continue
        nexts = [(j, vals, preds) for j in succ[i]]
        if code and owner:
            guard, neg, op, ops = parse(code)
            written = set(_dests(op, ops))
            if written & preds.keys():
                preds = {k: v for k, v in preds.items() if k not in written}
            if op.startswith("setp.") and len(ops) == 3 and guard is None:
                cmp = op.split(".")[1]
                if ops[1] in owner and IMM.match(ops[2]) and cmp in CMP:
                    preds = {**preds, ops[0]: (owner[ops[1]], CMP[cmp], int(ops[2], 0))}
            nexts = [(j, vals, preds) for j in succ[i]]
            if op.startswith("bra") and guard in preds and succ[i]:
                n, test, imm = preds[guard]
                taken = frozenset(v for v in vals[n] if bool(test(v, imm)) != neg)
                nexts = [(succ[i][0], _with(vals, n, taken), preds)]
                nexts += [(j, _with(vals, n, vals[n] - taken), preds) for j in succ[i][1:]]
        for j, v, p in nexts:
            key = (j, v, frozenset(p.items()))
            if all(v) and key not in seen:
                seen.add(key)
                todo.append((j, path, v, p))
    return hits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ptx", type=Path, help="a kernel's PTX (CUTE_DSL_KEEP=ptx)")
    ap.add_argument("--pattern", default=r"tcgen05\.(mma|cp)|wgmma\.mma_async|cp\.async\.bulk|st\.global",
                    help="what a give-up path must not reach (regex)")
    ap.add_argument("--site", type=int, action="append", help="wait site ids (default: every one)")
    args = ap.parse_args()
    text = args.ptx.read_text()
    items, _ = ptx_cfg(text)
    waits = find_waits(items)
    for site in sorted(set(args.site or [w.site for w in waits])):
        hits = reached_after(text, [site], args.pattern)
        print(f"site {site}: {'reaches ' + repr(hits[0][-1]) if hits else 'reaches none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Arrows one way in the Rust crate too: no cycle among the modules of ``rust/src``.

The Python side has its own walk (``tests/test_python_import_graph.py``); this one reads the
Rust sources as text, which is enough for a crate that names its modules by path. A module is a
file (``a/b.rs`` or ``a/b/mod.rs`` is ``crate::a::b``) or an inline ``mod name { .. }`` block
(``#[cfg(test)] mod tests``: a node of its own, so a test comparing two loops is not an arrow of
the design). An arrow goes from a module to the deepest module each of its paths names:
``crate::..``, ``super::..``, ``self::..`` and a child's name, in ``use`` trees and in code.
Declaring a child (``mod x;``) is not an arrow: a folder's ``mod.rs`` holds the vocabulary its
files use, and must not use them back. Comments and string literals are not read. Cost: well
under a second.
"""

from __future__ import annotations

import re
from pathlib import Path

from module_cycles import cycles

ROOT = Path(__file__).resolve().parents[1] / "rust" / "src"

_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"', re.S)
_INLINE_MOD = re.compile(r"\bmod\s+(\w+)\s*\{")
_USE = re.compile(r"\buse\s+([^;]+);")
_PATH = re.compile(r"(?<![\w:])((?:crate|super|self|[a-z_]\w*)(?:::\w+)+)")


def _file_module(path: Path, root: Path) -> tuple[str, ...]:
    rel = path.relative_to(root).with_suffix("").parts
    if rel in (("lib",), ("main",)):
        return ()
    return rel[:-1] if rel[-1] == "mod" else rel


def _blank(text: str) -> str:
    """The code with comments and string literals blanked out (lengths kept, newlines kept)."""
    return _COMMENT_OR_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _split_inline(module: tuple[str, ...], code: str) -> dict[tuple[str, ...], str]:
    """The file's own code and that of each inline ``mod name { .. }`` block, by module path."""
    out: dict[tuple[str, ...], str] = {}
    rest, pos = [], 0
    while (m := _INLINE_MOD.search(code, pos)) is not None:
        depth, i = 1, m.end()
        while depth and i < len(code):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        rest.append(code[pos:m.start()])
        for sub, text in _split_inline(module + (m.group(1),), code[m.end():i - 1]).items():
            out[sub] = out.get(sub, "") + text
        pos = i
    rest.append(code[pos:])
    out[module] = "".join(rest)
    return out


def _expand_use(tree: str) -> list[str]:
    """``a::{b, c::{d, e}}`` -> ``a::b``, ``a::c::d``, ``a::c::e`` (``as`` renames dropped)."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))
    if "{" not in tree:
        return [tree]
    head, body = tree.split("{", 1)
    body = body[: body.rindex("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    return [p for part in parts if part for p in _expand_use(head + part)]


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module (``crate::a::b``) -> the modules its code names, itself left out."""
    code: dict[tuple[str, ...], str] = {}
    for path in sorted(root.rglob("*.rs")):
        code.update(_split_inline(_file_module(path, root), _blank(path.read_text(encoding="utf-8"))))
    known = set(code)

    def resolve(here: tuple[str, ...], path: str) -> tuple[str, ...] | None:
        segs = [s for s in path.split("::") if s]
        base: tuple[str, ...]
        if segs[0] == "crate":
            base, segs = (), segs[1:]
        elif segs[0] in ("self", "super"):
            base = here
            while segs and segs[0] in ("self", "super"):
                base = base[:-1] if segs.pop(0) == "super" else base
        elif here + (segs[0],) in known:
            base = here  # a child module, named from its parent
        else:
            return None  # std, a crate from crates.io, a type's associated item
        best: tuple[str, ...] = base
        for s in segs:
            if best + (s,) not in known:
                break
            best = best + (s,)
        return best

    graph: dict[str, set[str]] = {}
    for here, text in code.items():
        paths = [p for m in _USE.finditer(text) for p in _expand_use(m.group(1))]
        paths += [m.group(1) for m in _PATH.finditer(_USE.sub(" ", text))]
        targets = {resolve(here, p) for p in paths} - {None, here}
        graph["::".join(("crate",) + here)] = {"::".join(("crate",) + t) for t in targets if t is not None}
    return graph


def test_the_crate_has_no_module_cycle():
    graph = module_graph()
    # the walk sees the crate: the folders' files and their arrows
    assert "crate::sim::continuous::rules" in graph["crate::sim::continuous::per_step"]
    assert "crate::sim::continuous" in graph["crate::sim::continuous::rules"]
    assert "crate::blocks" in graph["crate::sim::continuous::prefix_alloc"]
    assert cycles(graph) == []


def test_the_continuous_files_lean_on_the_vocabulary_and_the_rules_alone():
    graph = module_graph()
    folder = "crate::sim::continuous"
    # the KV pools of prefix caching: parts the loops drive, on the prefixes' vocabulary alone
    pools = {f"{folder}::prefix_pool", f"{folder}::prefix_alloc", f"{folder}::prefixes"}
    for name in ("per_step", "prefix", "rules"):
        inside = {m for m in graph[f"{folder}::{name}"] if m.startswith(folder + "::")}
        # trace.rs: the per-step record servelab trace asks for, a leaf beside the vocabulary;
        # the per-step twin runs on either pool (by counts in the vocabulary, or prefix.rs's),
        # and prefix.rs, the pool, never on the twin
        allowed = {f"{folder}::rules", f"{folder}::trace"} | (pools if name == "prefix" else set())
        if name == "per_step":
            allowed |= {f"{folder}::prefix", f"{folder}::prefix_pool"}
        assert inside <= allowed, (name, inside)
    assert not {m for m in graph[f"{folder}::trace"] if m.startswith(folder + "::")}
    assert not {m for m in graph[f"{folder}::prefixes"] if m.startswith(folder + "::")}
    for name, uses in (("prefix_pool", {"prefixes"}), ("prefix_alloc", {"prefixes", "prefix_pool"})):
        inside = {m for m in graph[f"{folder}::{name}"] if m.startswith(folder + "::")}
        assert inside <= {f"{folder}::{u}" for u in uses}, (name, inside)
    # prefix caching at event speed is a part of the one event loop (event_driven.rs), on its
    # pool, with the decoders as aggregates (aggregates.rs: a leaf beside the vocabulary); the
    # loop knows none of its parts but its own by counts
    inside = {m for m in graph[f"{folder}::prefix_events"] if m.startswith(folder + "::")}
    assert inside <= {f"{folder}::rules", f"{folder}::prefix", f"{folder}::prefix_pool", f"{folder}::aggregates",
                      f"{folder}::event_driven"}, inside
    loop = {m for m in graph[f"{folder}::event_driven"] if m.startswith(folder + "::")}
    assert loop <= {f"{folder}::rules", f"{folder}::aggregates"}, loop
    assert not {m for m in graph[f"{folder}::aggregates"] if m.startswith(folder + "::")}
    assert not {m for m in graph[folder] if m.startswith(folder + "::")}, graph[folder]


def test_a_cycle_is_found(tmp_path):
    """Two sibling files naming each other (as a loop and its rules once did) are a cycle; a
    parent's vocabulary used by its children is not."""
    (tmp_path / "sim").mkdir()
    (tmp_path / "lib.rs").write_text("pub mod sim;\n")
    (tmp_path / "sim" / "mod.rs").write_text("pub mod a;\nmod b;\npub struct Workload;\n")
    (tmp_path / "sim" / "a.rs").write_text(
        "// use super::b::nothing;\nuse super::{b::{plan, Books}, Workload};\npub fn add() {}\n")
    (tmp_path / "sim" / "b.rs").write_text(
        'pub fn plan() { let s = "crate::nowhere"; super::a::add(); }\npub struct Books;\n'
        "#[cfg(test)]\nmod tests {\n    use crate::sim::a;\n}\n")
    graph = module_graph(tmp_path)
    assert graph["crate::sim::a"] == {"crate::sim", "crate::sim::b"}
    assert graph["crate::sim::b::tests"] == {"crate::sim::a"}
    assert cycles(graph) == [["crate::sim::a", "crate::sim::b"]]
    (tmp_path / "sim" / "b.rs").write_text("pub fn plan() {}\npub struct Books;\n")
    assert cycles(module_graph(tmp_path)) == []

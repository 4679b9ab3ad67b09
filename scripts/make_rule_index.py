#!/usr/bin/env python3
"""Regenerates the table of docs/backward_rules.md: one row per op that records a node on the tape.

Every backward rule of the library is registered by one call

    record("name", {inputs}, {outputs}, {saved}, [...](const BackwardArgs& g) -> TensorList { ... },
           [...](const JvpArgs& j) -> TensorList { ... });

(autograd/node.h), the second lambda, the forward-mode (JVP) rule, being optional. This script finds those calls in the library's C++ sources (LIBRARY_DIRS below;
comments are skipped) and reads from each the op name, its inputs, outputs and saved tensors, and
the file and function it sits in. Where the name is a variable rather than a string literal, it
is resolved to the literals that variable takes: `const char* name = is_max ? "maximum" :
"minimum";` in the same function, or the arguments that the function's callers in the same file
pass for it (`rounding(..., "floor")`).

The one-line rule of each op is not in the code: it is scripts/backward_rules.txt, one line per op,

    KEY  RULE

where KEY is the recorded name, or NAME@FUNCTION when two functions record the same name. The
script fails if an op recorded in the code has no line there, or a line names an op that nothing
records any more. The table sits in docs/backward_rules.md between the markers of
bench/make_tables.py,

  <!-- make_tables: backward_rules -->
  ...
  <!-- end make_tables: backward_rules -->

  python3 scripts/make_rule_index.py           rewrite the page in place
  python3 scripts/make_rule_index.py --check   exit 1 if the page is not what the code gives
  python3 scripts/make_rule_index.py --print   print the table to stdout
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "backward_rules.md")
RULES = os.path.join(ROOT, "scripts", "backward_rules.txt")
BLOCK = "backward_rules"
# The library's source directories (the top-level CMakeLists.txt builds gradgrad from these).
LIBRARY_DIRS = ["autograd", "core", "dist", "io", "kernels", "nn", "ops", "optim", "python"]
SOURCE_EXT = (".cpp", ".h", ".cu", ".cuh")


class IndexError_(Exception):
    pass


# ------------------------------------------------------------------ reading C++

def blank(text):
    """`text` with comments, string and character literals and preprocessor lines replaced by
    spaces (newlines kept), so offsets and line numbers stay those of `text`, and with a mask of
    the string literals' spans."""
    out = list(text)
    strings = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":  # a preprocessor line, with its continuations
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):  # 1'000 is a digit separator
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            if c == '"':
                strings.append((i, j + 1))
            for k in range(i + 1, j):
                out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out), strings


def closing(code, start):
    """The offset just past the bracket that closes the one at code[start]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    for i in range(start, len(code)):
        c = code[i]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                raise IndexError_(f"unbalanced {c!r} at offset {i}")
            if not stack:
                return i + 1
    raise IndexError_(f"no closing bracket for offset {start}")


def split_args(code, text, open_paren):
    """The top-level arguments of the call whose '(' is at open_paren: (start, end) spans."""
    end = closing(code, open_paren) - 1
    spans, depth, a = [], 0, open_paren + 1
    for i in range(open_paren + 1, end):
        c = code[i]
        if c in "([{":  # template angle brackets are not tracked: no argument of record has a comma in one
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            spans.append((a, i))
            a = i + 1
    spans.append((a, end))
    return spans, end


def functions(code):
    """(body_start, body_end, header_start, name) of every top-level function body: the outermost
    braces that are not a namespace's, with the name read from the text before them."""
    found = []
    depth_ns = []  # the namespaces open here
    last_delim = 0
    i = 0
    while i < len(code):
        c = code[i]
        if c == "{":
            header = code[last_delim:i]
            is_ns = bool(re.match(r'\s*(inline\s+)?namespace\b|\s*extern\s*"\s*"\s*$', header))
            if not is_ns:  # a function (or class) body: skip to its end
                end = closing(code, i)
                m = None
                paren = header.find("(")
                if paren >= 0:
                    m = re.search(r"([A-Za-z_~][\w:~]*)\s*$", header[:paren])
                name = m.group(1) if m else header.strip().split()[-1] if header.strip() else "?"
                found.append((i, end, last_delim, name))
                i = end
                last_delim = end
                continue
            depth_ns.append(is_ns)
            last_delim = i + 1
        elif c == "}":
            if depth_ns:
                depth_ns.pop()
            last_delim = i + 1
        elif c == ";":
            last_delim = i + 1
        i += 1
    return found


def literals_in(text, a, b, strings):
    """The contents of the string literals inside text[a:b]."""
    return [text[s + 1:e - 1] for (s, e) in strings if a <= s and e <= b]


def enclosing(funcs, pos):
    for f in funcs:
        if f[0] <= pos < f[1]:
            return f
    return None


def params_of(code, text, func):
    """The parameter names of a function, from its header."""
    header = code[func[2]:func[0]]
    paren = header.find("(")
    if paren < 0:
        return []
    spans, _ = split_args(code, text, func[2] + paren)
    names = []
    for a, b in spans:
        p = code[a:b].split("=")[0].strip()
        m = re.search(r"(\w+)\s*$", p)
        names.append(m.group(1) if m else "")
    return names


def resolve_name(path, text, code, strings, funcs, func, var, at):
    """The string literals a `const char*` variable named `var` stands for at offset `at`."""
    # 1. declared in the function: const char* var = <expr with literals>;
    for m in re.finditer(rf"\bconst\s+char\s*\*\s*{var}\s*=", code[func[0]:at]):
        a = func[0] + m.end()
        b = code.index(";", a)
        names = literals_in(text, a, b, strings)
        if names:
            return names
    # 2. a parameter: the literals the function's callers in this file pass for it
    params = params_of(code, text, func)
    if var in params:
        k = params.index(var)
        fname = func[3].split("::")[-1]
        names = []
        for m in re.finditer(rf"(?<![\w.>:]){re.escape(fname)}\s*\(", code):
            if func[2] <= m.start() < func[0]:
                continue  # the definition itself
            spans, _ = split_args(code, text, m.end() - 1)
            if k < len(spans):
                a, b = spans[k]
                lit = literals_in(text, a, b, strings)
                if len(lit) == 1 and text[a:b].strip() == '"' + lit[0] + '"':
                    names.append(lit[0])
        if names:
            return names
    raise IndexError_(f"{path}: record({var}, ...) in {func[3]}: cannot tell which op names `{var}` stands for "
                      f"(give record a string literal, or a `const char* {var} = \"...\"` in the function)")


def tensor_list(src):
    """'{a, b}' -> 'a, b'; '{}' -> '—'; a variable stays as it is."""
    s = " ".join(src.split())
    if s.startswith("{") and s.endswith("}"):
        inner = s[1:-1].strip()
        return inner if inner else "—"
    return s


def scan(root=ROOT):
    """Every recorded op: dicts with name, file, line, function, inputs, outputs, saves."""
    sites = []
    walks = [os.walk(os.path.join(root, d)) for d in LIBRARY_DIRS]
    for dirpath, dirnames, filenames in (entry for walk in walks for entry in walk):
        dirnames.sort()
        for fn in sorted(filenames):
            if not fn.endswith(SOURCE_EXT):
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if "record(" not in text:
                continue
            code, strings = blank(text)
            funcs = None
            for m in re.finditer(r"(?<![\w.>:])record\s*\(", code):
                spans, _ = split_args(code, text, m.end() - 1)
                first = text[spans[0][0]:spans[0][1]].strip()
                if re.match(r"const\s+char\s*\*", first):
                    continue  # the declaration and definition of record itself
                # after the backward: the JVP rule (a lambda, or a JvpFn variable), the RecordOptions, or both
                if len(spans) not in (5, 6, 7):
                    raise IndexError_(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: record(...) with "
                                      f"{len(spans)} arguments, expected 5 to 7")
                funcs = funcs if funcs is not None else functions(code)
                func = enclosing(funcs, m.start())
                line = text.count("\n", 0, m.start()) + 1
                if func is None:
                    raise IndexError_(f"{rel}:{line}: record(...) outside any function")
                lit = re.fullmatch(r'"([^"\\]*)"', first)
                if lit:
                    names = [lit.group(1)]
                elif re.fullmatch(r"\w+", first):
                    names = resolve_name(rel, text, code, strings, funcs, func, first, m.start())
                else:
                    raise IndexError_(f"{rel}:{line}: cannot read the op name of record({first}, ...)")
                args = [text[a:b] for a, b in spans]
                has_jvp = len(args) == 7 or (len(args) == 6 and "RecordOptions" not in args[5])
                for name in names:
                    sites.append({"seq": len(sites), "name": name, "file": rel, "line": line, "function": func[3],
                                  "inputs": tensor_list(args[1]), "outputs": tensor_list(args[2]),
                                  "saves": tensor_list(args[3]), "jvp": has_jvp})
    return sites


# ------------------------------------------------------------------ rules and the table

def read_rules(path=RULES):
    """KEY -> RULE from the rules file (# comments and blank lines skipped)."""
    rules, problems = {}, []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            parts = s.split(None, 1)
            if len(parts) < 2:
                problems.append(f"{os.path.relpath(path, ROOT)}:{n}: `{s}` has no rule after the key")
                continue
            if parts[0] in rules:
                problems.append(f"{os.path.relpath(path, ROOT)}:{n}: `{parts[0]}` listed twice")
            rules[parts[0]] = parts[1]
    return rules, problems


def keys_of(sites):
    """Each site's key: its name, or NAME@FUNCTION where several functions record that name."""
    by_name = {}
    for s in sites:
        by_name.setdefault(s["name"], []).append(s)
    problems = []
    for name, group in by_name.items():
        for s in group:
            s["key"] = name if len(group) == 1 else f"{name}@{s['function'].split('::')[-1]}"
        keys = [s["key"] for s in group]
        for k in set(keys):
            if keys.count(k) > 1:
                where = ", ".join(f"{s['file']}:{s['line']}" for s in group if s["key"] == k)
                problems.append(f"`{k}` is recorded more than once in one function ({where}): the index cannot "
                                f"tell the rules apart")
    return problems


def check_entries(sites, rules):
    problems = []
    keys = {s["key"] for s in sites}
    for s in sites:
        if s["key"] not in rules:
            problems.append(f"{s['file']}:{s['line']} ({s['function']}) records `{s['name']}`, which has no line in "
                            f"scripts/backward_rules.txt: add `{s['key']}  <its rule>`")
    names = {s["name"] for s in sites}
    for k in rules:
        if k in names and k not in keys:
            problems.append(f"scripts/backward_rules.txt names `{k}`, which several functions record now: give each "
                            f"its own line, NAME@FUNCTION")
        elif k not in keys:
            problems.append(f"scripts/backward_rules.txt names `{k}`, which no record(...) call in the code records "
                            f"(renamed or removed? recorded ops: see --print)")
    return problems


def cell(s):
    return s.replace("|", "\\|")


# The order of the table: the everyday ops first, then attention, the collectives, the rest.
FILE_ORDER = ["ops/elementwise.cpp", "ops/reduce.cpp", "ops/linalg.cpp", "ops/nn.cpp", "ops/shape.cpp",
              "ops/attention.cpp", "ops/", "dist/ops.cpp", "dist/", "autograd/"]


def file_rank(path):
    for i, p in enumerate(FILE_ORDER):
        if path == p or (p.endswith("/") and path.startswith(p)):
            return i
    return len(FILE_ORDER)


def table(sites, rules):
    out = ["| op | inputs → outputs | saves | backward: gradient of each input | JVP | recorded in |",
           "|---|---|---|---|---|---|"]
    for s in sorted(sites, key=lambda s: (file_rank(s["file"]), s["file"], s["line"], s["seq"])):
        where = f"[`{s['file']}`](../{s['file']}) `{s['function']}`"
        io = f"`{s['inputs']}` → `{s['outputs']}`"
        saves = "—" if s["saves"] == "—" else f"`{s['saves']}`"
        jvp = "yes" if s["jvp"] else "**none**"
        out.append(f"| `{s['name']}` | {cell(io)} | {cell(saves)} | {cell(rules[s['key']])} | {jvp} | {where} |")
    with_jvp = sum(1 for s in sites if s["jvp"])
    out += ["", f"{len(sites)} recorded ops in {len({s['file'] for s in sites})} files; "
                f"{with_jvp} with a forward-mode (JVP) rule."]
    return out


def build():
    sites = scan()
    problems = keys_of(sites)
    rules, more = read_rules()
    problems += more
    if not problems:
        problems += check_entries(sites, rules)
    if problems:
        raise IndexError_("\n".join(problems))
    return table(sites, rules)


def splice(page, name, lines):
    pattern = re.compile(rf"(<!-- make_tables: {name} -->\n)(?:.*?\n)?(<!-- end make_tables: {name} -->)", re.S)
    if not pattern.search(page):
        raise IndexError_(f"docs/backward_rules.md has no block <!-- make_tables: {name} --> ... "
                          f"<!-- end make_tables: {name} -->")
    return pattern.sub(lambda m: m.group(1) + "\n".join(lines) + "\n" + m.group(2), page, count=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/backward_rules.md is not current")
    ap.add_argument("--print", action="store_true", help="print the table to stdout")
    args = ap.parse_args()
    try:
        lines = build()
        if args.print:
            print("\n".join(lines))
            return 0
        with open(PAGE, encoding="utf-8") as f:
            page = f.read()
        new = splice(page, BLOCK, lines)
    except IndexError_ as e:
        print(f"make_rule_index: {e}", file=sys.stderr)
        return 1
    if args.check:
        if new != page:
            print("make_rule_index: docs/backward_rules.md is not what the code gives; rerun: "
                  "python3 scripts/make_rule_index.py", file=sys.stderr)
            return 1
        print(f"make_rule_index: docs/backward_rules.md is current ({len(lines) - 4} ops)")
        return 0
    if new != page:
        with open(PAGE, "w", encoding="utf-8") as f:
            f.write(new)
        print("make_rule_index: rewrote docs/backward_rules.md")
    else:
        print("make_rule_index: docs/backward_rules.md already current")
    return 0


if __name__ == "__main__":
    sys.exit(main())

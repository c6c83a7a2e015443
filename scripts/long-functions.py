#!/usr/bin/python3
"""Lists the functions longer than a limit (80 lines unless --max says otherwise) in the
repository's Python and C++ (the files git tracks), longest first, as FILE:LINE LENGTH NAME.

  scripts/long-functions.py             every language
  scripts/long-functions.py --max 60    a stricter limit
  scripts/long-functions.py --lang py   Python only (exact); --lang cc: C++ only (a scan)
  scripts/long-functions.py PATH...     only files under these paths

Exits 1 when it listed any, so it can gate a change. A length counts every line from the function's
first line to its last, blank lines and comments included.

Python is measured exactly: the ast's end_lineno - lineno + 1 for each def (nested ones too; a
decorator's lines are not counted, as the ast's def starts at "def").

C++ (*.cc and *.h) is measured by a scan, not a parser, so it is approximate:
- comments, string and character literals (raw strings and digit separators included) and
  preprocessor lines are blanked first, so braces in #if / #else branches that do not balance on
  their own would mislead the count: a file whose braces do not balance is named on stderr;
- a "{" opens a function body when it is at namespace or class scope (not inside another function)
  and the text since the last ";" or closed body ends with ")" and qualifiers (const, noexcept,
  override, final, "-> T", ...) or with "}" after a constructor's initializer list ") : a_{x}" (a
  "{" right after a name there is a member's initializer, not the body). So TEST(...)
  bodies and lambdas at namespace scope count as functions; lambdas and local classes inside a
  function count toward that function;
- a body's first line is the first line of that text (template <...> and the return type
  included), its last line the line of the matching "}";
- its name is that text, shortened.
"""

import argparse
import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_functions(path, text):
    """-> [(line, length, name)] for every def in the file, nested ones included."""
    try:
        tree = ast.parse(text, path)
    except SyntaxError as e:
        sys.stderr.write("long-functions: %s: not Python 3: %s\n" % (path, e))
        return []
    out = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                out.append((child.lineno, child.end_lineno - child.lineno + 1, name))
                walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)
    walk(tree, "")
    return out


# ---- C++ ------------------------------------------------------------------------------------
_RAW_STRING = re.compile(r'(?:u8|u|U|L)?R"([^()\\\s]{0,16})\(')


def blank_cc(text):
    """The text with comments, literals and preprocessor lines replaced by spaces (newlines kept,
    so offsets and line numbers stay as they were)."""
    out, i, n = list(text), 0, len(text)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":      # a directive, with its continuation lines
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            blank(i, j)
            i = j
            continue
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif (m := _RAW_STRING.match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            j = text.find(")" + m.group(1) + '"', m.end())
            j = n if j < 0 else j + len(m.group(1)) + 2
            blank(i, j)
            i = j
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):   # 1'000 is a number
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i, min(j + 1, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


_TYPE_HEAD = re.compile(r"^(template\s*<.*>\s*)?(class|struct|union|enum)\b")
_FUNCTION_TAIL = re.compile(r"\)\s*(const|volatile|noexcept(\s*\([^()]*\))?|override|final|mutable|&&?|"
                            r"->\s*[\w:<>,\s*&]+|\s)*$")
_INIT_LIST = re.compile(r"\)\s*(noexcept\s*)?:(?!:)")


def _brace_kind(head):
    """What a "{" at namespace or class scope opens, from the text before it (blanked, one line)."""
    if re.match(r"^(inline\s+)?namespace\b", head) or re.match(r"^extern\s*$", head):
        return "scope"
    if _TYPE_HEAD.match(head) and not head.endswith(")"):
        return "scope"
    if "(" in head and (_FUNCTION_TAIL.search(head) or (_INIT_LIST.search(head) and head.endswith("}"))):
        return "function"
    return "other"


def cc_functions(path, text):
    """-> [(line, length, name)] for every function body at namespace or class scope."""
    code = blank_cc(text)
    line_at = [0] * (len(code) + 1)
    line = 1
    for k, ch in enumerate(code):
        line_at[k] = line
        if ch == "\n":
            line += 1
    line_at[len(code)] = line
    out = []
    stack = []          # (kind, head start offset, head text); "inner": any brace inside a body
    head_start = None   # offset of the current statement's first character at this scope
    parens = 0          # "(" open in that statement: a "{" inside them is an argument, not a body
    for k, ch in enumerate(code):
        in_function = any(kind in ("function", "other") for kind, _, _ in stack)
        if ch == "{":
            if in_function:
                stack.append(("inner", None, None))
                continue
            start = head_start if head_start is not None else k
            head = " ".join(code[start:k].split())
            kind = "other" if parens > 0 else _brace_kind(head)
            stack.append((kind, start, head))
            if kind != "other":
                head_start, parens = None, 0
        elif ch == "}":
            if not stack:
                sys.stderr.write("long-functions: %s:%d: unbalanced '}'\n" % (path, line_at[k]))
                continue
            kind, start, head = stack.pop()
            if kind == "function":
                first = line_at[start]
                out.append((first, line_at[k] - first + 1, head[:70]))
            if kind != "other" and not any(x[0] in ("function", "other") for x in stack):
                head_start, parens = None, 0
        elif in_function:
            continue
        elif ch == ";" or (ch == ":" and head_start is not None
                           and code[head_start:k].strip() in ("public", "private", "protected")):
            head_start, parens = None, 0
        elif ch in "()":
            parens += 1 if ch == "(" else -1
            head_start = k if head_start is None else head_start
        elif not ch.isspace() and head_start is None:
            head_start = k
    if stack:
        sys.stderr.write("long-functions: %s: %d '{' never closed\n" % (path, len(stack)))
    return out


# ---- the repository -------------------------------------------------------------------------
def tracked_files(paths, exts):
    files = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--", *paths], capture_output=True,
                           check=True).stdout.decode().split("\0")
    return [f for f in files if f.endswith(exts) and os.path.isfile(os.path.join(ROOT, f))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=80, help="the longest a function may be (lines)")
    ap.add_argument("--lang", choices=("py", "cc", "all"), default="all")
    ap.add_argument("paths", nargs="*", help="only files under these paths (relative to the repository)")
    args = ap.parse_args()
    found = []
    for lang, exts, measure in (("py", (".py",), python_functions), ("cc", (".cc", ".h"), cc_functions)):
        if args.lang not in (lang, "all"):
            continue
        for f in tracked_files(args.paths, exts):
            with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            found += [(length, f, line, name) for line, length, name in measure(f, text) if length > args.max]
    for length, f, line, name in sorted(found, key=lambda x: (-x[0], x[1], x[2])):
        print("%s:%d %d %s" % (f, line, length, name))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

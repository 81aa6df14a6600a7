#!/usr/bin/env python3
"""Fails listing the source files over 600 lines and the functions over their limit: 80 lines in
the production code (services/, common/, engine/, tools/), 100 in bench/ and tests/. A longer
function does several jobs; split it. With folders as arguments, only those are checked.

A function is a brace block whose head (the text since the previous ';', '{' or '}') ends in a
parameter list with optional qualifiers, outside any other function. Comments and string
literals are blanked first so their braces do not count.

scripts/size-exceptions.txt lists what may stay over for now, one `PATH` (the file's length) or
`PATH:FUNCTION` a line, then the reason; a listed item is printed as allowed. An entry that no
longer matches anything over its limit fails the check too, so the list only shrinks.
Exit status 1 when anything is over its limit and not listed, or an entry is stale.
"""
import os
import re
import sys
from pathlib import Path

MAX_FILE_LINES = 600
# The function limit of each checked folder: production code, then the benchmarks and tests.
MAX_FUNCTION_LINES = {'common': 80, 'engine': 80, 'services': 80, 'tools': 80, 'bench': 100,
                      'tests': 100}
EXCEPTIONS = Path('scripts/size-exceptions.txt')
CONTROL = re.compile(r'\b(if|for|while|switch|catch|do|else)\s*(\(|$)')
HEAD = re.compile(r'\)\s*(const|override|noexcept|final|mutable|&|&&|->\s*[\w:<>,\s*&]+|\s)*$')


def blank(text):
    """Comments and literals -> spaces, newlines kept (line numbers stay right)."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|R"(\w*)\(.*?\)\1"|"(\\.|[^"\\\n])*"|\'(\\.|[^\'\\\n])*\'',
                         re.S)
    return pattern.sub(lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text)


def functions(text):
    """(name, first line, line count) of each outermost function body."""
    found, head, stack = [], [], []
    line = 1
    for ch in text:
        if ch == '\n':
            line += 1
        if ch == '{':
            h = ''.join(head).strip()
            h = re.sub(r'\)\s*:(?!:)\s*[\w:]+\s*[({].*$', ')', h, flags=re.S)
            inside = any(kind == 'function' for kind, _, _ in stack)
            is_function = (not inside and HEAD.search(h) and not CONTROL.search(h.split('(')[0] + '(')
                           and '=' not in h.split('(')[0])
            name = re.findall(r'([\w:~<>]+)\s*\(', h)
            stack.append(('function' if is_function else 'block', line, name[0] if name else '?'))
            head = []
        elif ch == '}':
            if stack:
                kind, start, name = stack.pop()
                if kind == 'function':
                    found.append((name, start, line - start + 1))
            head = []
        elif ch == ';':
            head = []
        else:
            head.append(ch)
    return found


def read_exceptions(path):
    """{PATH or PATH:FUNCTION: reason} of the exceptions file; a line without a reason is an error."""
    exceptions = {}
    if not path.exists():
        return exceptions
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        key, _, reason = line.partition(' ')
        if not reason.strip():
            sys.exit(f'{path}:{number}: "{key}" needs a reason after it')
        exceptions[key] = reason.strip()
    return exceptions


def oversized(folder):
    """(key, message) of each file and function of `folder` over its limit."""
    function_limit = MAX_FUNCTION_LINES.get(Path(folder).parts[0], 100)
    for path in sorted(Path(folder).rglob('*')):
        if path.suffix not in ('.h', '.cc', '.cu', '.cuh'):
            continue
        text = path.read_text(errors='replace')
        lines = text.count('\n')
        if lines > MAX_FILE_LINES:
            yield str(path), f'{path}: {lines} lines (limit {MAX_FILE_LINES})'
        for name, start, count in functions(blank(text)):
            if count > function_limit:
                yield (f'{path}:{name}',
                       f'{path}:{start}: {name}: {count} lines (limit {function_limit})')


def main(folders):
    os.chdir(Path(__file__).resolve().parent.parent)
    exceptions = read_exceptions(EXCEPTIONS)
    bad, used = 0, set()
    for folder in folders:
        for key, message in oversized(folder):
            if key in exceptions:
                used.add(key)
                print(f'{message}: allowed for now ({EXCEPTIONS}: {exceptions[key]})')
            else:
                print(message)
                bad += 1
    for key in exceptions:
        # A stale entry: within its limit now, or no longer there (only folders checked count).
        if key not in used and any(Path(key.split(':')[0]).is_relative_to(f) for f in folders):
            print(f'{EXCEPTIONS}: {key} is within its limits now (or gone): remove the line')
            bad += 1
    if not bad:
        print(f'sizes: ok (files <= {MAX_FILE_LINES} lines; functions <= 80 lines in production '
              'code, <= 100 in bench/ and tests/)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:] or list(MAX_FUNCTION_LINES)))

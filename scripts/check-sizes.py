#!/usr/bin/env python3
"""Fails listing the source files over 600 lines and the functions over 100 lines (services/,
common/, engine/, tools/ by default): a longer function does several jobs; split it.

A function is a brace block whose head (the text since the previous ';', '{' or '}') ends in a
parameter list with optional qualifiers, outside any other function. Comments and string
literals are blanked first so their braces do not count. Exit status 1 when anything is listed.
"""
import os
import re
import sys
from pathlib import Path

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 100
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


def main(folders):
    bad = 0
    os.chdir(Path(__file__).resolve().parent.parent)
    for folder in folders:
        for path in sorted(Path(folder).rglob('*')):
            if path.suffix not in ('.h', '.cc', '.cu', '.cuh'):
                continue
            text = path.read_text(errors='replace')
            lines = text.count('\n')
            if lines > MAX_FILE_LINES:
                print(f'{path}: {lines} lines (limit {MAX_FILE_LINES})')
                bad += 1
            for name, start, count in functions(blank(text)):
                if count > MAX_FUNCTION_LINES:
                    print(f'{path}:{start}: {name}: {count} lines (limit {MAX_FUNCTION_LINES})')
                    bad += 1
    if not bad:
        print(f'sizes: ok (files <= {MAX_FILE_LINES} lines, functions <= {MAX_FUNCTION_LINES})')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:] or ['common', 'engine', 'services', 'tools']))

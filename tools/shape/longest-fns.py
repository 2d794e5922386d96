#!/usr/bin/env python3
"""The longest non-test functions of the workspace, in lines (signature to closing brace).

usage: tools/shape/longest-fns.py [N] [ROOT]   (default: the 10 longest under src/)

A function is `fn name` at the start of a line (after visibility and qualifiers) whose body
opens with `{`; its length runs to the matching `}` (braces in strings, chars and comments are
skipped). Everything after a file's first `#[cfg(test)]` and every file under a `tests/`,
`benches/` or `fuzz/` directory, or named `tests.rs`, is left out.
"""
import os
import re
import sys

FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?((const|async|unsafe|extern "C")\s+)*fn\s+(\w+)')


def strip(line, state):
    """The line without string/char contents and comments; state carries block comments."""
    out, i = [], 0
    while i < len(line):
        if state['block']:
            j = line.find('*/', i)
            if j < 0:
                return ''.join(out)
            state['block'], i = False, j + 2
            continue
        c = line[i]
        if line.startswith('//', i):
            break
        if line.startswith('/*', i):
            state['block'], i = True, i + 2
            continue
        if c == '"':
            j = i + 1
            while j < len(line) and line[j] != '"':
                j += 2 if line[j] == '\\' else 1
            i = j + 1
            continue
        if c == "'" and re.match(r"'(\\.|[^\\'])'", line[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", line[i:]).group(0))
            continue
        out.append(c)
        i += 1
    return ''.join(out)


def functions(path):
    lines = open(path, encoding='utf-8').read().split('\n')
    cut = next((k for k, l in enumerate(lines) if l.strip() == '#[cfg(test)]'), len(lines))
    state = {'block': False}
    code = [strip(l, state) for l in lines[:cut]]
    k = 0
    while k < len(code):
        m = FN.match(code[k])
        if not m:
            k += 1
            continue
        depth, start, opened = 0, k, False
        j = k
        while j < len(code):
            for c in code[j]:
                if c == '{':
                    depth, opened = depth + 1, True
                elif c == '}':
                    depth -= 1
                elif c == ';' and not opened and depth == 0:
                    j = len(code)  # a declaration without a body
                    break
            if opened and depth == 0:
                yield (j - start + 1, path, start + 1, m.group(5))
                break
            j += 1
        k = start + 1


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    root = sys.argv[2] if len(sys.argv) > 2 else 'src'
    found = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ('tests', 'benches', 'fuzz', 'target')]
        for f in files:
            if f.endswith('.rs') and f != 'tests.rs':
                found.extend(functions(os.path.join(d, f)))
    found.sort(reverse=True)
    for length, path, line, name in found[:n]:
        print(f'{length:5} {path}:{line} {name}')
    over = sum(1 for f in found if f[0] > 100)
    print(f'{len(found)} functions, {over} over 100 lines')


main()

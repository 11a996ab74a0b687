#!/usr/bin/env python3
"""Every cross-reference in the repository resolves inside it.

Checks, over the files git tracks (test models aside):
  - Markdown links [text](target) that are not URLs: the target exists, relative to the file.
  - Paths written in backticks in Markdown (`compiler/config.{h,cc}`, `runtime/include/kiln/`)
    that start with a top-level folder, or that name a source file in a folder: each exists, from the root or from the file's folder
    (brace lists expanded; a source stem such as `compiler/pipeline` may omit .h/.cc).
  - Names of Markdown files mentioned in any text file (a word ending in .md with a capital
    letter in it): such a file exists, at that path from the repository root or from the
    mentioning file's folder.
  - Nothing points outside the repository: a relative path that climbs (`../x`) from the file's
    folder must stay inside the repository root.
Usage: check_doc_paths.py REPO_ROOT. Prints every broken reference; exits 1 if there is one.
"""
import os
import re
import subprocess
import sys

TOP = ('cache/', 'compiler/', 'kernels/', 'runtime/', 'schemas/', 'tests/', 'tools/')
TEXT = ('.md', '.cc', '.h', '.c', '.cuh', '.py', '.sh', '.proto', '.build', '.txt', '.yaml')


def expand_braces(path):
    m = re.search(r'\{([^{}]*)\}', path)
    if not m:
        return [path]
    out = []
    for alt in m.group(1).split(','):
        out += expand_braces(path[:m.start()] + alt + path[m.end():])
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    os.chdir(root)
    files = subprocess.check_output(['git', 'ls-files'], text=True).split('\n')
    files = [f for f in files if f and not f.startswith('tests/models/')]  # models are data
    if not any(f == 'README.md' for f in files):
        print('check_doc_paths: no README.md tracked under', root)
        return 1
    bad = []
    for f in files:
        if not (f.endswith(TEXT) or os.path.basename(f) in ('meson.build', 'run')):
            continue
        try:
            text = open(f, encoding='utf-8').read()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        here = os.path.dirname(f)
        for n, line in enumerate(text.split('\n'), 1):
            where = f'{f}:{n}'
            for climb in re.findall(r'(?<![\w./-])((?:\.\./)+[\w.-]+)', line):
                if os.path.normpath(os.path.join(here, climb)).startswith('..'):
                    bad.append(f'{where}: {climb} points outside the repository')
            for name in re.findall(r'(?<![\w/.-])([\w./-]*[A-Z][\w./-]*\.md)\b', line):
                if not any(os.path.exists(os.path.normpath(os.path.join(base, name)))
                           for base in ('.', here)):
                    bad.append(f'{where}: no file {name}')
            if not f.endswith('.md'):
                continue
            for target in re.findall(r'\]\(([^)\s]+)\)', line):
                if re.match(r'[a-z]+://|#|mailto:', target):
                    continue
                path = os.path.normpath(os.path.join(here, target.split('#')[0]))
                if not os.path.exists(path):
                    bad.append(f'{where}: link target {target} does not exist')
            for token in re.findall(r'`([^`\s]+)`', line):
                if re.search(r'[<>*]|\.\.\.|…|^[a-z]+://|^\.|^build/', token):
                    continue
                if not token.startswith(TOP) and not (
                        '/' in token and re.search(r'\.(h|cc|cuh|py|sh|md|proto)\b', token)):
                    continue
                for path in expand_braces(token.rstrip('.,:;')):
                    path = re.sub(r'(\.(h|cc|cuh|py|sh|md|proto))[^/]*$', r'\1', path)
                    if not any(os.path.exists(os.path.join(base, path + ext))
                               for base in ('.', here) for ext in ('', '.h', '.cc', '_test.cc', '.sh')):
                        bad.append(f'{where}: no path {path} (from `{token}`)')
    for b in bad:
        print(b)
    print(f'check_doc_paths: {len(bad)} broken reference(s) in {len(files)} files')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())

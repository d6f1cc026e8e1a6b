#!/usr/bin/env python3
"""Turn a text file into a C source defining `const char NAME[]` with its contents."""
import sys

name, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(src, 'rb').read()
with open(dst, 'w') as out:
    out.write('/* generated from %s; do not edit */\n' % src.split('/')[-1])
    # One string literal, however long: both compilers take it.
    out.write('#pragma GCC diagnostic ignored "-Woverlength-strings"\n')
    out.write('const char %s[] =\n' % name)
    for line in data.decode('utf-8').splitlines(keepends=True):
        out.write('  "%s"\n' % line.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n'))
    out.write(';\n')

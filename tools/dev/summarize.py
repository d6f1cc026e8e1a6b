#!/usr/bin/env python3
"""Summarises meson test JSON logs (meson-logs/testlog.json, or its
--logbase variant; one JSON object per line) from one or more build
directories. Prints one line per failed test,
then as the last line "N passed, N failed" (", N skipped" when any were).
A log that is missing or empty means that run did not happen (a failed
configure or build) and counts as one failure. Exits 1 when anything
failed."""

import json
import sys

PASSED = {"OK", "EXPECTEDFAIL"}
FAILED = {"FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS"}
SKIPPED = {"SKIP"}


def main(paths):
    passed = failed = skipped = 0
    notes = []
    for path in paths:
        build = path.split("/meson-logs/")[0]
        try:
            with open(path, encoding="utf-8") as f:
                lines = [l for l in f if l.strip()]
        except OSError:
            lines = []
        if not lines:
            failed += 1
            notes.append(f"{build}: no test results (configure or build failed)")
            continue
        for line in lines:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            result = entry.get("result", "")
            name = entry.get("name", "?")
            if result in PASSED:
                passed += 1
            elif result in SKIPPED:
                skipped += 1
            elif result in FAILED:
                failed += 1
                notes.append(f"{build}: {name}: {result}")
            else:
                failed += 1
                notes.append(f"{build}: {name}: unknown result {result!r}")
    if notes:
        print("failures:")
        for n in notes:
            print(f"  {n}")
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""The end of scripts/test: from cargo-nextest's JUnit report, the slowest
tests, the seconds per test binary, and one closing line
"N passed, N failed[, N skipped]".

    scripts/test-times.py JUNIT_XML [N]
"""
import sys
import xml.etree.ElementTree as ET


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"no test report at {path}: {e}", file=sys.stderr)
        return 1
    tests = []
    for suite in root.iter("testsuite"):
        for case in suite.iter("testcase"):
            outcome = "passed"
            if case.find("failure") is not None or case.find("error") is not None:
                outcome = "failed"
            elif case.find("skipped") is not None:
                outcome = "skipped"
            binary = suite.get("name", "?")
            tests.append((float(case.get("time", "0")), binary, case.get("name", "?"), outcome))
    per_binary = {}
    for secs, binary, _, _ in tests:
        per_binary[binary] = per_binary.get(binary, 0.0) + secs
    out = sys.stderr
    print(f"\nTest seconds per binary (each test's own time, summed; "
          f"tests run side by side, so the sum exceeds the wall time):", file=out)
    for binary, secs in sorted(per_binary.items(), key=lambda kv: -kv[1]):
        print(f"  {secs:8.1f}  {binary}", file=out)
    print(f"\nThe {top} slowest tests:", file=out)
    for secs, binary, name, outcome in sorted(tests, reverse=True)[:top]:
        mark = "" if outcome == "passed" else f"  ({outcome})"
        print(f"  {secs:8.1f}  {binary} {name}{mark}", file=out)
    passed = sum(1 for t in tests if t[3] == "passed")
    failed = sum(1 for t in tests if t[3] == "failed")
    skipped = sum(1 for t in tests if t[3] == "skipped")
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Fails when a ctest run skipped a test it may not skip.

  check-skips.py JUNIT_XML [ALLOW_LIST]

JUNIT_XML is what `ctest --output-junit FILE` wrote; ALLOW_LIST defaults to
tests/allowed-skips.txt (a shell glob on the test name and a reason per line). ctest marks a
GoogleTest test skipped whenever its output contains "[  SKIPPED ]", whatever its exit status,
so a fixture that failed in SetUpTestSuite (GoogleTest then skips the suite's tests) looks like a
skip. This script fails on:
  - a skipped test that no pattern of the allow-list matches;
  - a skipped test whose output reports a failure, allowed or not;
  - a test ctest could not run (e.g. its executable was not built).
It prints every skip it saw, allowed ones with their reason.
"""
import fnmatch
import os
import re
import sys
import xml.etree.ElementTree as ET

FAILED_IN_OUTPUT = re.compile(r"^\s*[1-9][0-9]* FAILED TEST|^\[  FAILED  \] [^0-9]", re.MULTILINE)


def read_allow_list(path):
    rules = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) < 2 or not parts[1].strip():
                sys.exit(f"{path}:{n}: pattern '{parts[0]}' has no reason")
            rules.append((parts[0], parts[1].strip()))
    return rules


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    junit = sys.argv[1]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    allow = sys.argv[2] if len(sys.argv) == 3 else os.path.join(root, "tests", "allowed-skips.txt")
    rules = read_allow_list(allow)
    tree = ET.parse(junit)
    unexpected, failed_but_skipped, allowed, not_run = [], [], [], []
    n_cases = 0
    for case in tree.iter("testcase"):
        n_cases += 1
        if case.find("skipped") is None and case.get("status") != "notrun":
            continue
        name = case.get("name", "")
        out = case.findtext("system-out") or ""
        skipped = case.find("skipped")
        message = skipped.get("message", "") if skipped is not None else ""
        if message != "SKIP_REGULAR_EXPRESSION_MATCHED":
            not_run.append(f"{name} ({message or 'not run'})")  # e.g. an executable not built
            continue
        if FAILED_IN_OUTPUT.search(out):
            failed_but_skipped.append(name)
            continue
        reason = next((r for p, r in rules if fnmatch.fnmatchcase(name, p)), None)
        if reason is None:
            why = re.search(r"Skipped\n(.*)", out)
            unexpected.append(f"{name}{' (' + why.group(1).strip() + ')' if why else ''}")
        else:
            allowed.append(f"{name}: {reason}")
    print(f"skips: {len(allowed)} allowed, {len(unexpected)} unexpected, "
          f"{len(failed_but_skipped)} failed-but-skipped, {len(not_run)} not run, of {n_cases} tests ({junit})")
    for a in allowed:
        print(f"  allowed skip  {a}")
    for u in unexpected:
        print(f"  UNEXPECTED SKIP  {u}")
    for f in failed_but_skipped:
        print(f"  FAILED (reported as skipped)  {f}")
    for n in not_run:
        print(f"  NOT RUN  {n}")
    if unexpected or failed_but_skipped or not_run:
        print(f"only the skips listed in {allow} may happen: fix the tests above, or add a pattern "
              "with its reason if the hardware they need is absent")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Fails when a ctest run skipped a test it may not skip, or ran no test at all.

  check-skips.py JUNIT_XML [ALLOW_LIST]

JUNIT_XML is what `ctest --output-junit FILE` wrote; ALLOW_LIST defaults to
tests/allowed-skips.txt (a shell glob on the test name and a reason per line). ctest marks a
GoogleTest test skipped whenever its output contains "[  SKIPPED ]", whatever its exit status,
so a fixture that failed in SetUpTestSuite (GoogleTest then skips the suite's tests) looks like a
skip.

A skip whose reason is a missing CPU feature ("this CPU lacks avx512f ...", the form every
kernel-path test uses) is allowed by that reason, not by name, and only when the feature really is
absent here: not among /proc/cpuinfo's flags, or hidden with IMPRESS_CPU_HIDE (which the kernels
honour too). A test that claims a feature this CPU has fails the run, so the paths the CPU runs
stay tested.

This script fails on:
  - a skipped test that neither a missing CPU feature nor a pattern of the allow-list explains;
  - a skipped test whose output reports a failure, allowed or not;
  - a test ctest could not run (e.g. its executable was not built);
  - a run in which no test executed.
It prints every skip it saw, allowed ones with their reason, and which kernel paths (the
`/scalar`, `/avx2`, `/avx512` test instances) ran here.
"""
import fnmatch
import os
import re
import sys
import xml.etree.ElementTree as ET

FAILED_IN_OUTPUT = re.compile(r"^\s*[1-9][0-9]* FAILED TEST|^\[  FAILED  \] [^0-9]", re.MULTILINE)
LACKS_FEATURE = re.compile(r"this CPU lacks ([A-Za-z0-9_]+)")
KERNEL_PATHS = ("scalar", "avx2", "avx512")


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


def normalise(feature):
    """/proc/cpuinfo writes avx512_vnni where compilers say avx512vnni."""
    return feature.lower().replace("_", "")


def cpu_features(cpuinfo="/proc/cpuinfo"):
    """The CPU's feature flags, less those IMPRESS_CPU_HIDE hides; None when unknown."""
    flags = None
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = {normalise(x) for x in line.split(":", 1)[1].split()}
                    break
    except OSError:
        return None
    if flags is None:
        return None
    hidden = {normalise(x) for x in os.environ.get("IMPRESS_CPU_HIDE", "").split(",") if x}
    return flags - hidden


def cpu_model(cpuinfo="/proc/cpuinfo"):
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    junit = sys.argv[1]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    allow = sys.argv[2] if len(sys.argv) == 3 else os.path.join(root, "tests", "allowed-skips.txt")
    rules = read_allow_list(allow)
    features = cpu_features()
    tree = ET.parse(junit)
    unexpected, failed_but_skipped, allowed, not_run, wrong_feature = [], [], [], [], []
    n_cases = n_executed = 0
    paths = {p: [0, 0] for p in KERNEL_PATHS}  # path -> [ran, skipped]
    for case in tree.iter("testcase"):
        n_cases += 1
        name = case.get("name", "")
        # A parameterised test's name: "Suite/Test.Case/avx2  # GetParam() = ...".
        base = name.split("  #", 1)[0].strip()
        kernel_path = base.rsplit("/", 1)[-1] if "/" in base else None
        skipped = case.find("skipped")
        if skipped is None and case.get("status") != "notrun":
            n_executed += 1
            if kernel_path in paths:
                paths[kernel_path][0] += 1
            continue
        out = case.findtext("system-out") or ""
        message = skipped.get("message", "") if skipped is not None else ""
        if message != "SKIP_REGULAR_EXPRESSION_MATCHED":
            not_run.append(f"{name} ({message or 'not run'})")  # e.g. an executable not built
            continue
        if FAILED_IN_OUTPUT.search(out):
            failed_but_skipped.append(name)
            continue
        if kernel_path in paths:
            paths[kernel_path][1] += 1
        lacks = LACKS_FEATURE.search(out)
        if lacks:
            feature = normalise(lacks.group(1))
            if features is None or feature not in features:
                allowed.append(f"{name}: this CPU lacks {lacks.group(1)}")
            else:
                wrong_feature.append(f"{name} (says this CPU lacks {lacks.group(1)}, but it has it)")
            continue
        reason = next((r for p, r in rules if fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(base, p)), None)
        if reason is None:
            why = re.search(r"Skipped\n(.*)", out)
            unexpected.append(f"{name}{' (' + why.group(1).strip() + ')' if why else ''}")
        else:
            allowed.append(f"{name}: {reason}")
    print(f"skips: {len(allowed)} allowed, {len(unexpected) + len(wrong_feature)} unexpected, "
          f"{len(failed_but_skipped)} failed-but-skipped, {len(not_run)} not run; "
          f"{n_executed} of {n_cases} tests executed ({junit})")
    tested = [f"{p} ({ran} tests)" for p, (ran, _) in paths.items() if ran]
    untested = [f"{p} ({sk} skipped)" for p, (ran, sk) in paths.items() if not ran and sk]
    if tested or untested:
        print(f"kernel paths tested on this CPU ({cpu_model()}): {', '.join(tested) or 'none'}"
              + (f"; not runnable here: {', '.join(untested)}" if untested else ""))
    for a in allowed:
        print(f"  allowed skip  {a}")
    for u in unexpected + wrong_feature:
        print(f"  UNEXPECTED SKIP  {u}")
    for f in failed_but_skipped:
        print(f"  FAILED (reported as skipped)  {f}")
    for n in not_run:
        print(f"  NOT RUN  {n}")
    rc = 0
    if n_executed == 0:
        print("no test executed: a filter that matches nothing, or a build without tests")
        rc = 1
    if unexpected or wrong_feature or failed_but_skipped or not_run:
        print(f"only a missing CPU feature or the skips listed in {allow} may happen: fix the tests above, "
              "or add a pattern with its reason if the hardware they need is absent")
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())

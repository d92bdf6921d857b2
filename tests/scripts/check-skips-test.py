#!/usr/bin/env python3
"""scripts/check-skips.py on made-up JUnit reports: which skips it allows and which runs it fails.

  check-skips-test.py PATH_TO_CHECK_SKIPS

A CPU-feature skip is allowed by its reason only when the feature is absent. sse2 is on every
x86-64 CPU, so "this CPU lacks sse2" must fail unless IMPRESS_CPU_HIDE hides sse2; a feature no
CPU has ("nosuchfeature") is always absent.
"""
import os
import platform
import subprocess
import sys
import tempfile
import unittest
from xml.sax.saxutils import escape, quoteattr

CHECK = sys.argv.pop(1) if len(sys.argv) > 1 else None
SKIP_OUT = "[ RUN      ] T.x\n[  SKIPPED ] T.x\nSkipped\n{reason}\n"


def case(name, skip_reason=None, failed=False):
    if skip_reason is None:
        return f'<testcase name={quoteattr(name)} status="run"><system-out>ok</system-out></testcase>'
    out = SKIP_OUT.format(reason=skip_reason) + ("[  FAILED  ] T.x\n" if failed else "")
    return (f'<testcase name={quoteattr(name)} status="run"><skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/>'
            f"<system-out>{escape(out)}</system-out></testcase>")


class CheckSkips(unittest.TestCase):
    def run_check(self, cases, hide="", allow_lines=("Cuda*  no GPU",)):
        with tempfile.TemporaryDirectory() as d:
            junit = os.path.join(d, "junit.xml")
            with open(junit, "w", encoding="utf-8") as f:
                f.write('<?xml version="1.0"?><testsuite>' + "".join(cases) + "</testsuite>")
            allow = os.path.join(d, "allowed.txt")
            with open(allow, "w", encoding="utf-8") as f:
                f.write("\n".join(allow_lines) + "\n")
            env = dict(os.environ, IMPRESS_CPU_HIDE=hide)
            p = subprocess.run([sys.executable, CHECK, junit, allow], env=env, capture_output=True, text=True)
            return p.returncode, p.stdout

    def test_clean_run_passes_and_names_the_kernel_paths_tested(self):
        # ctest names parameterised GoogleTest cases with their parameter after "  #".
        rc, out = self.run_check([case("Paths/QuantPath.Dot/avx2  # GetParam() = 4-byte object <01-00 00-00>"),
                                  case("Paths/QuantPath.Dot/scalar")])
        self.assertEqual(rc, 0, out)
        self.assertIn("kernel paths tested on this CPU", out)
        self.assertIn("avx2 (1 tests)", out)

    def test_a_skip_for_an_absent_feature_is_allowed_by_its_reason(self):
        rc, out = self.run_check([case("A.b"), case("Any/Name.x/avx512", "this CPU lacks nosuchfeature (needed)")])
        self.assertEqual(rc, 0, out)
        self.assertIn("not runnable here: avx512 (1 skipped)", out)

    @unittest.skipUnless(platform.machine() in ("x86_64", "AMD64"), "sse2 is an x86-64 feature")
    def test_a_skip_claiming_a_feature_the_cpu_has_fails(self):
        cases = [case("A.b"), case("Paths/QuantPath.Dot/avx2", "this CPU lacks sse2 (needed by the avx2 path)")]
        rc, out = self.run_check(cases)
        self.assertEqual(rc, 1, out)
        self.assertIn("but it has it", out)
        rc, out = self.run_check(cases, hide="sse2")  # as on a CPU without it
        self.assertEqual(rc, 0, out)

    def test_an_unexplained_skip_fails_and_an_allow_listed_one_passes(self):
        self.assertEqual(self.run_check([case("A.b"), case("Other.x", "no reason")])[0], 1)
        self.assertEqual(self.run_check([case("A.b"), case("CudaParity.x", "no GPU")])[0], 0)

    def test_a_skip_whose_output_shows_a_failure_fails_even_when_allowed(self):
        rc, out = self.run_check([case("A.b"), case("CudaParity.x", "no GPU", failed=True)])
        self.assertEqual(rc, 1, out)
        self.assertIn("FAILED (reported as skipped)", out)

    def test_a_run_that_executed_no_test_fails(self):
        rc, out = self.run_check([case("CudaParity.x", "no GPU")])
        self.assertEqual(rc, 1, out)
        self.assertIn("no test executed", out)
        self.assertEqual(self.run_check([])[0], 1)


if __name__ == "__main__":
    if CHECK is None:
        sys.exit(__doc__)
    unittest.main()

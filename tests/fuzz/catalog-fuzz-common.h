// Shared by the catalog fuzzers (catalog-fuzz.cpp: through PrefixStore::Open over files;
// catalog-image-fuzz.cpp: Catalog over an in-memory image): the template store they start from,
// its geometry, and the row-edit programs that turn an input into a catalog.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "base/sqlite.h"
#include "store/prefix-store.h"

namespace catalog_fuzz {

namespace fs = std::filesystem;
using impress::Status;
using namespace impress::store;

constexpr int kLayers = 2, kHeads = 2, kDim = 8;

// The store's tables. Their columns are read from the catalog itself (SELECT *), so a column
// the store adds is edited too.
constexpr const char* kTables[] = {"meta", "nodes", "segments", "chunks", "probes"};
constexpr const char* kSelectAll[] = {"SELECT * FROM meta", "SELECT * FROM nodes", "SELECT * FROM segments",
                                      "SELECT * FROM chunks", "SELECT * FROM probes"};
constexpr int kNumTables = int(sizeof(kTables) / sizeof(kTables[0]));

// One SQLite value as read or to be written.
struct Value {
  int type = SQLITE_NULL;  // SQLITE_NULL, SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB
  int64_t i = 0;
  double f = 0;
  std::string bytes;
};
using Row = std::vector<Value>;

struct World {
  std::string root;                               // this process's scratch folder
  std::string store_dir;                          // where each input's store is opened
  std::map<std::string, std::string> data_files;  // name -> bytes of the template's data files
  std::string catalog;                            // the template's catalog.db
  std::vector<std::vector<int32_t>> prefixes;     // what the template stored
};

inline PrefixStoreOptions Options(const std::string& dir) {
  PrefixStoreOptions o;
  o.dir = dir;
  o.model_fingerprint = "fuzz-model";
  o.n_layer = kLayers;
  o.n_head_kv = kHeads;
  o.head_dim = kDim;
  o.probe_kv_heads = {1};
  o.chunk_tokens = 4;
  o.device_bytes = 16 << 10;  // small tiers: recovery restores statistics, reads promote chunks
  o.host_bytes = 32 << 10;
  o.ssd_bytes = 64ull << 20;
  o.data_file_bytes = 1ull << 20;
  o.reorder_interval = std::chrono::milliseconds(0);
  o.force_pread = true;  // the catalog is under test, not the read engine; no ring per input
  // Checksums are checked on open, so every chunk a bad row points at wrong data is dropped by
  // recovery (else the store finds it on the first read, by design) and CheckConsistency, which
  // reads every chunk, must pass.
  o.verify_on_open = true;
  // An error of the moment (locked, I/O, full) is not retried: the file is the same on every try,
  // and each pause would slow the run.
  o.catalog_open_attempts = 1;
  return o;
}

// K and V of tokens [start, n) of `tokens`: a function of the position and layer.
inline Status InsertSynthetic(PrefixStore& s, const std::vector<int32_t>& tokens, size_t start) {
  const size_t n = tokens.size() - start, row = size_t(kHeads) * kDim;
  std::vector<std::vector<impress::f16_t>> k(kLayers), v(kLayers);
  std::vector<LayerKV> layers(kLayers);
  for (int il = 0; il < kLayers; ++il) {
    k[size_t(il)].resize(n * row);
    v[size_t(il)].resize(n * row);
    for (size_t i = 0; i < n * row; ++i) {
      k[size_t(il)][i] = impress::f16_t(uint16_t((start * row + i + size_t(il) * 7) & 0x3bff));
      v[size_t(il)][i] = impress::f16_t(uint16_t((start * row + i + size_t(il) * 13 + 1) & 0x3bff));
    }
    layers[size_t(il)] = {k[size_t(il)].data(), v[size_t(il)].data()};
  }
  return s.Insert(tokens, start, layers).status();
}

inline std::string ReadWhole(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteWhole(const fs::path& p, const void* data, size_t n) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), std::streamsize(n));
}

[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "catalog fuzzer: %s\n", what.c_str());
  std::fflush(stderr);
  __builtin_trap();
}

// A scratch folder on a RAM disk where there is one (the store fsyncs on every commit).
inline std::string ScratchRoot(const std::string& tag) {
  const char* env = std::getenv("CATALOG_FUZZ_DIR");
  std::string base = env && *env ? env : (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
  return base + "/impress-" + tag + "-" + std::to_string(::getpid());
}

// Writes the template store: three prefixes sharing a head (so the tree has a split), importance
// reports and a reorder (so segments carry mapping lists and statistics), one pinned prefix.
inline void MakeTemplate(World& w) {
  const std::string dir = w.root + "/template";
  fs::remove_all(dir);
  auto opened = PrefixStore::Open(Options(dir));
  if (!opened.ok()) Fail("cannot create the template store: " + opened.status().ToString());
  PrefixStore& s = **opened;
  std::vector<int32_t> a;
  for (int i = 0; i < 13; ++i) a.push_back(100 + i);
  std::vector<int32_t> b(a.begin(), a.begin() + 6);
  for (int i = 0; i < 9; ++i) b.push_back(500 + i);
  std::vector<int32_t> c = a;
  for (int i = 0; i < 7; ++i) c.push_back(900 + i);
  w.prefixes = {a, b, c};
  Status st = InsertSynthetic(s, a, 0);
  if (st.ok()) st = InsertSynthetic(s, b, 6);
  if (st.ok()) st = InsertSynthetic(s, c, a.size());
  if (!st.ok()) Fail("template insert: " + st.ToString());
  for (const auto& p : w.prefixes) {
    MatchHandle h = s.Match(p);
    std::vector<uint32_t> sel;
    for (uint32_t i = 0; i < h.n_matched; i += 3) sel.push_back(i);
    for (int il = 0; il < kLayers; ++il) (void)s.ReportImportance(h, il, sel);
    (void)s.Release(h);
  }
  if (auto r = s.ReorderNow(); !r.ok()) Fail("template reorder: " + r.status().ToString());
  if (Status p = s.Pin(b); !p.ok()) Fail("template pin: " + p.ToString());
  if (Status c2 = s.CheckConsistency(); !c2.ok()) Fail("template inconsistent: " + c2.ToString());
  opened->reset();  // closes the catalog: the WAL is checkpointed into catalog.db
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == "catalog.db") w.catalog = ReadWhole(e.path());
    else if (name.rfind("catalog.db", 0) != 0) w.data_files[name] = ReadWhole(e.path());
  }
  if (w.catalog.empty()) Fail("the template store left no catalog.db");
}

inline Value ReadValue(const impress::sqlite::Stmt& s, int col) {
  Value v;
  v.type = sqlite3_column_type(s.get(), col);
  if (v.type == SQLITE_INTEGER) v.i = s.Int(col);
  if (v.type == SQLITE_FLOAT) v.f = s.Double(col);
  if (v.type == SQLITE_TEXT || v.type == SQLITE_BLOB) v.bytes = s.Text(col);
  return v;
}

inline void BindValue(impress::sqlite::Stmt& s, int i, const Value& v) {
  switch (v.type) {
    case SQLITE_INTEGER: s.Bind(i, v.i); break;
    case SQLITE_FLOAT: s.Bind(i, v.f); break;
    case SQLITE_TEXT: s.Bind(i, std::string_view(v.bytes)); break;
    case SQLITE_BLOB: s.BindBlob(i, std::string_view(v.bytes)); break;
    default: sqlite3_bind_null(s.get(), i); break;
  }
}

// A value an attacker would try: a boundary integer, the old value nudged, or arbitrary bytes.
inline Value FuzzValue(FuzzedDataProvider& in, const Value& old) {
  static constexpr int64_t kInts[] = {0,
                                      1,
                                      -1,
                                      2,
                                      3,
                                      4,
                                      5,
                                      63,
                                      64,
                                      4096,
                                      INT32_MAX,
                                      int64_t(UINT32_MAX),
                                      int64_t(UINT32_MAX) + 1,
                                      4000000000,
                                      int64_t(1) << 40,
                                      std::numeric_limits<int64_t>::max(),
                                      std::numeric_limits<int64_t>::min()};
  Value v;
  switch (in.ConsumeIntegralInRange(0, 6)) {
    case 0: v.type = SQLITE_NULL; break;
    case 1:
      v.type = SQLITE_INTEGER;
      v.i = in.PickValueInArray(kInts);
      break;
    case 2:
      v.type = SQLITE_INTEGER;
      // Wrapping, as the nudge of INT64_MIN must not be undefined in the harness itself.
      v.i = int64_t(uint64_t(old.type == SQLITE_INTEGER ? old.i : 0) +
                    uint64_t(in.ConsumeIntegralInRange<int64_t>(-3, 3)));
      break;
    case 3:
      v.type = SQLITE_INTEGER;
      v.i = in.ConsumeIntegral<int64_t>();
      break;
    case 4:
      v.type = SQLITE_FLOAT;
      v.f = in.ConsumeFloatingPoint<double>();
      break;
    case 5:
      v.type = SQLITE_TEXT;
      v.bytes = in.ConsumeRandomLengthString(64);
      break;
    default: {
      // A blob: arbitrary bytes, or the old blob with a few bytes overwritten (mapping lists,
      // token spans and block checksums stay plausible that way).
      v.type = SQLITE_BLOB;
      if (old.type == SQLITE_BLOB && !old.bytes.empty() && in.ConsumeBool()) {
        v.bytes = old.bytes;
        for (int n = in.ConsumeIntegralInRange(1, 4); n > 0; --n)
          v.bytes[in.ConsumeIntegralInRange<size_t>(0, v.bytes.size() - 1)] = char(in.ConsumeIntegral<uint8_t>());
        if (in.ConsumeBool()) v.bytes.resize(in.ConsumeIntegralInRange<size_t>(0, v.bytes.size() * 2));
      } else {
        v.bytes = in.ConsumeRandomLengthString(256);
      }
    }
  }
  return v;
}

// Applies the row-edit program to `db` (a copy of the template's catalog). Edits the catalog
// cannot hold (a NOT NULL or key conflict) are skipped, as SQLite refuses them.
inline void ApplyRowEdits(impress::sqlite::SqliteDb& db, FuzzedDataProvider& in) {
  std::vector<std::vector<Row>> rows(kNumTables);
  std::vector<std::vector<std::string>> cols(kNumTables);
  for (int t = 0; t < kNumTables; ++t) {
    auto s = db.Prep(kSelectAll[t]);
    if (!s.ok()) Fail(std::string("template catalog lacks ") + kTables[t]);
    for (int c = 0; c < sqlite3_column_count(s->get()); ++c)
      cols[size_t(t)].push_back(sqlite3_column_name(s->get(), c));
    Status st = db.ForEachRow(*s, "read", [&](const impress::sqlite::Stmt& r) {
      Row row;
      for (size_t c = 0; c < cols[size_t(t)].size(); ++c) row.push_back(ReadValue(r, int(c)));
      rows[size_t(t)].push_back(std::move(row));
    });
    if (!st.ok()) Fail("reading the template catalog: " + st.ToString());
  }
  std::vector<bool> loosened(kNumTables, false);
  for (int n_ops = 0; in.remaining_bytes() > 0 && n_ops < 64; ++n_ops) {
    const int op = in.ConsumeIntegralInRange(0, 3);
    const int t = in.ConsumeIntegralInRange(0, kNumTables - 1);
    std::vector<Row>& table = rows[size_t(t)];
    if (op == 3) {
      loosened[size_t(t)] = true;
      continue;
    }
    if (table.empty()) continue;
    const size_t r = in.ConsumeIntegralInRange<size_t>(0, table.size() - 1);
    if (op == 2) {
      table.erase(table.begin() + std::ptrdiff_t(r));
      continue;
    }
    const int col = in.ConsumeIntegralInRange(0, int(cols[size_t(t)].size()) - 1);
    Value v = FuzzValue(in, table[r][size_t(col)]);
    if (op == 1) table.push_back(table[r]);
    table[op == 1 ? table.size() - 1 : r][size_t(col)] = std::move(v);
  }
  Status st = db.Exec("BEGIN", "begin");
  for (int t = 0; t < kNumTables && st.ok(); ++t) {
    // Dynamic SQL (the column lists come from the file): prepared here, not through the
    // helper's statement cache, which is keyed by literal.
    const std::string name = kTables[t];
    std::string names, marks;
    for (const std::string& c : cols[size_t(t)]) {
      names += (names.empty() ? "" : ", ") + c;
      marks += marks.empty() ? "?" : ",?";
    }
    const std::string clear = loosened[size_t(t)] ? "DROP TABLE " + name + "; CREATE TABLE " + name + "(" + names + ")"
                                                  : "DELETE FROM " + name;
    st = db.Exec(clear.c_str(), "clear");
    const std::string insert = "INSERT OR IGNORE INTO " + name + " VALUES(" + marks + ")";
    sqlite3_stmt* raw = nullptr;
    if (st.ok() && sqlite3_prepare_v2(db.handle(), insert.c_str(), -1, &raw, nullptr) != SQLITE_OK)
      Fail("prepare " + insert + ": " + sqlite3_errmsg(db.handle()));
    for (const Row& row : rows[size_t(t)]) {
      if (!st.ok()) break;
      impress::sqlite::Stmt s(raw);
      for (size_t c = 0; c < row.size(); ++c) BindValue(s, int(c) + 1, row[c]);
      (void)s.Step("insert");  // a NOT NULL violation is refused by SQLite: that edit is lost
    }
    sqlite3_finalize(raw);
  }
  if (st.ok()) st = db.Exec("COMMIT", "commit");
  if (!st.ok()) Fail("writing the edited catalog: " + st.ToString());
}

}  // namespace catalog_fuzz

// libFuzzer target: the store's catalog reader without a file per input. A real store is written
// once at start-up (its catalog is the template); each input becomes a catalog image in memory
// (sqlite::SqliteDb::OpenImage: no file, no fsync, no directory) and goes through
// Catalog::OpenOn (schema version, quick_check, table creation, migrations, the statements Load
// needs) and Catalog::Load (every row checked against the limits, invalid rows deleted). The
// input is read as catalog-fuzz.cpp reads it (the same seeds and dictionary serve both); bit 1 of
// the first byte opens the catalog read-only:
//   even: the rest is the whole SQLite file;
//   odd:  the rest is a program of row edits applied to the template's catalog.
// What must hold: Open and Load either fail with a Status or give rows within the limits
// catalog.h documents, this model's and the other models' (the recovery of PrefixStore::Open
// relies on them before it checks the rows against the KV geometry); an unedited template loads
// exactly as written; the rows Load gave, written back through Apply, load again, ids kept.
// Never a crash, a hang or an absurd allocation (run with -rss_limit_mb). catalog-fuzz.cpp adds
// the recovery against the data files and the store's use of what it recovered, at ~1/5 of the
// speed; this target is the one for long campaigns.
//
// Single-threaded harness (libFuzzer calls one input at a time per process).
#include <spdlog/spdlog.h>

#include <cmath>
#include <set>

#include "store/catalog.h"
#include "tests/fuzz/catalog-fuzz-common.h"

using namespace catalog_fuzz;
using impress::sqlite::SqliteDb;

namespace {

struct ImageWorld {
  std::string catalog;  // the template store's catalog.db
  std::string model;    // the model key its rows belong to
  size_t n_nodes = 0, n_segments = 0, n_chunks = 0, n_probes = 0;
};
ImageWorld* world = nullptr;

void Check(bool ok, const std::string& what) {
  if (!ok) Fail(what);
}

// What Load promises about every row it returns (catalog.h's limits).
void CheckWithinLimits(const CatalogContents& cc) {
  for (const NodeRecord& n : cc.nodes) {
    Check(n.id >= 1 && n.id < kMaxCatalogId && n.parent < kMaxCatalogId, "node id out of the limits");
    Check(n.segment >= 1 && n.segment < kMaxCatalogId && n.seg_begin < kMaxSegmentTokens, "node segment out of range");
    Check(!n.tokens.empty() && n.tokens.size() <= kMaxSegmentTokens, "node token span out of range");
    Check(n.last_access <= (UINT64_MAX >> 1) && n.hits <= (UINT64_MAX >> 1), "node counters out of range");
  }
  for (const SegmentRow& g : cc.segments) {
    Check(g.id >= 1 && g.id < kMaxCatalogId, "segment id out of the limits");
    Check(g.n_tokens >= 1 && g.n_tokens <= kMaxSegmentTokens, "segment token count out of range");
    Check(g.generation <= (UINT64_MAX >> 1), "segment generation out of range");
  }
  const auto extent_ok = [](const ChunkExtent& e) {
    return e.file < kMaxDataFileId && e.offset < kMaxExtentOffset && e.length >= 1 && e.length < kMaxExtentLength &&
           e.n_slots >= 1 && e.n_slots <= kMaxSegmentTokens;
  };
  for (const ChunkRow& c : cc.chunks) {
    Check(c.segment >= 1 && c.segment < kMaxCatalogId && c.layer < kMaxCatalogLayers && c.index < kMaxSegmentTokens,
          "chunk key out of the limits");
    Check(extent_ok(c.ext) && c.ext.slot_begin < kMaxSegmentTokens, "chunk extent out of the limits");
    Check(std::isfinite(c.freq) && c.freq >= 0 && c.freq <= 9223372036854775808.0, "chunk frequency out of range");
    Check(std::isfinite(c.imp_ratio) && c.imp_ratio >= 0 && c.imp_ratio <= 1, "chunk important ratio out of range");
  }
  for (const ProbeRow& p : cc.probes) {
    Check(p.segment >= 1 && p.segment < kMaxCatalogId && p.layer < kMaxCatalogLayers, "probe key out of the limits");
    Check(extent_ok(p.ext), "probe extent out of the limits");
  }
  for (const ForeignExtent& e : cc.foreign.extents)
    Check(e.segment >= 1 && e.segment < kMaxCatalogId && e.layer < kMaxCatalogLayers && e.file < kMaxDataFileId &&
              e.offset < kMaxExtentOffset && e.length >= 1 && e.length < kMaxExtentLength,
          "another model's extent out of the limits");
  for (const ForeignNode& f : cc.foreign.nodes)
    Check(f.id >= 1 && f.id < kMaxCatalogId && f.segment >= 1 && f.segment < kMaxCatalogId,
          "another model's node out of the limits");
  Check(cc.foreign.max_id < kMaxCatalogId, "largest foreign id out of the limits");
}

// The rows Load gave, upserted back in one batch (statistics too).
CatalogBatch WriteBack(const CatalogContents& cc) {
  CatalogBatch b;
  b.upsert_nodes = cc.nodes;
  b.upsert_segments = cc.segments;
  b.upsert_chunks = cc.chunks;
  b.upsert_probes = cc.probes;
  b.chunk_stats = cc.chunks;
  b.node_stats = cc.nodes;
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // Load warns about every bad row
  world = new ImageWorld;
  World files;
  files.root = ScratchRoot("catalog-image-fuzz");
  fs::create_directories(files.root);
  MakeTemplate(files);  // the only files this target writes
  fs::remove_all(files.root);
  world->catalog = files.catalog;
  auto db = SqliteDb::OpenImage(world->catalog, "template");
  if (!db.ok()) Fail("template image: " + db.status().ToString());
  auto model = (*db)->QueryText("SELECT model FROM models", "read the model key");
  if (!model.ok() || !*model) Fail("the template catalog names no model");
  world->model = **model;
  auto c = Catalog::OpenOn(std::move(db).value(), world->model);
  if (!c.ok()) Fail("template open: " + c.status().ToString());
  auto cc = (*c)->Load();
  if (!cc.ok() || cc->n_invalid_rows != 0 || cc->nodes.empty() || cc->chunks.empty() || cc->probes.empty())
    Fail("the template catalog does not load whole");
  world->n_nodes = cc->nodes.size();
  world->n_segments = cc->segments.size();
  world->n_chunks = cc->chunks.size();
  world->n_probes = cc->probes.size();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool edits = data[0] % 2 == 1;
  CatalogOpenOptions o;
  o.busy_timeout = std::chrono::milliseconds(0);
  o.read_only = (data[0] & 2) != 0;
  bool unedited = false;
  auto db = edits ? SqliteDb::OpenImage(world->catalog, "catalog")
                  : SqliteDb::OpenImage(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), "catalog");
  if (!db.ok()) return 0;  // an image SQLite refuses outright
  if (edits) {
    FuzzedDataProvider in(data + 1, size - 1);
    unedited = in.remaining_bytes() == 0;
    ApplyRowEdits(**db, in);
  }
  auto opened = Catalog::OpenOn(std::move(db).value(), world->model, o);
  if (!opened.ok()) {
    Check(!unedited, "the template catalog refused: " + opened.status().ToString());
    return 0;  // a clear refusal is a correct answer
  }
  Catalog& catalog = **opened;
  auto cc = catalog.Load();
  if (!cc.ok()) {
    Check(!unedited, "the template catalog does not load: " + cc.status().ToString());
    return 0;
  }
  CheckWithinLimits(*cc);
  if (unedited)
    Check(cc->n_invalid_rows == 0 && cc->nodes.size() == world->n_nodes && cc->segments.size() == world->n_segments &&
              cc->chunks.size() == world->n_chunks && cc->probes.size() == world->n_probes,
          "the template catalog loads other rows than it holds");
  if (o.read_only) {
    Check(!catalog.Apply(WriteBack(*cc)).ok() || WriteBack(*cc).empty(), "a read-only catalog took a write");
    return 0;
  }
  // What Load accepted, Apply writes back and Load accepts again (a table stripped of its keys
  // may refuse the upsert: that is a Status, not a finding).
  if (!catalog.Apply(WriteBack(*cc)).ok()) return 0;
  auto again = catalog.Load();
  if (!again.ok()) return 0;
  CheckWithinLimits(*again);
  std::set<uint64_t> nodes, segments;
  for (const NodeRecord& n : again->nodes) nodes.insert(n.id);
  for (const SegmentRow& g : again->segments) segments.insert(g.id);
  for (const NodeRecord& n : cc->nodes) Check(nodes.count(n.id) == 1, "a node written back did not load again");
  for (const SegmentRow& g : cc->segments)
    Check(segments.count(g.id) == 1, "a segment written back did not load again");
  return 0;
}

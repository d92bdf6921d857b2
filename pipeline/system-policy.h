// SystemPolicy: a serving system (docs/design.md section 5) as one object: what each layer reads
// from the prefix KV store, how it picks the prefix tokens it attends to, and which cache policy
// the tiers run while it serves. The systems are compositions of a few parts (LayerSelection, a
// store::PolicyKind, whether its selections feed the reorder); the ablations of IMPRESS are the
// same parts combined otherwise. The registry lists every system with its names; the pipeline,
// the report, the benches, the CLI and the GUI ask it instead of naming systems.
//
// Adding a system: a file pipeline/system-NAME.cpp with a factory returning its policy, and one
// line in the registry's list (pipeline/system-registry.cpp); see docs/DEVELOPING.md. A system
// made elsewhere (a test's) joins with RegisterSystem.
//
// Thread contract: a SystemPolicy is immutable once made and may be used from any thread. The
// registry is internally synchronized; the policies it hands out live until the process exits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "pipeline/report.h"  // SystemKind, the registry's id of a system
#include "store/cache-policy.h"

namespace impress {

struct PipelineSettings;

// How a layer of the matched prefix is served: what is read and how the tokens are chosen.
enum class LayerSelection {
  kNone,        // no reuse: the whole prompt is computed (ReComp)
  kWholeLayer,  // every prefix token's K/V, the next layer's prefetched (AS-like)
  kAllHeads,    // all keys read, every head scored (H2O), the chosen tokens' values read (AS+H2O)
  kProbe,       // the probe heads' keys scored and judged (Jaccard against the threshold): pass,
                // the probe's choice with its keys and values; fail, kAllHeads (IMPRESS)
  kPositions,   // positions the policy picks without scores (SystemPolicy::ChoosePositions),
                // their K/V read
};

// What the registry lists about a system.
struct SystemTraits {
  std::string name;         // `--system`, the server's "impress": {"system"}, saved settings, reports
  std::string display;      // a readable name: GUI tooltips, help
  std::string description;  // one sentence: what it reads and keeps
  LayerSelection selection = LayerSelection::kNone;
  store::PolicyKind cache = store::PolicyKind::kLru;  // the tiers' cache policy while it serves
  // Its selections feed the store's reorder (the benches turn PipelineSettings::report_importance
  // on for it and run the reorder between requests).
  bool reorders = false;
};

class SystemPolicy {
 public:
  explicit SystemPolicy(SystemTraits traits) : traits_(std::move(traits)) {}
  virtual ~SystemPolicy() = default;
  SystemPolicy(const SystemPolicy&) = delete;
  SystemPolicy& operator=(const SystemPolicy&) = delete;

  const SystemTraits& traits() const { return traits_; }
  const std::string& name() const { return traits_.name; }
  bool reuses() const { return traits_.selection != LayerSelection::kNone; }  // reads prefix KV at all
  bool probes() const { return traits_.selection == LayerSelection::kProbe; }
  bool loads_whole_layers() const { return traits_.selection == LayerSelection::kWholeLayer; }

  // How layer il is served under `s`. By default the system's selection, except that a system
  // that reuses loads its first `s.dense_layers` layers whole (PipelineSettings::dense_layers).
  virtual LayerSelection SelectionFor(const PipelineSettings& s, int il) const;

  // kPositions: the prefix positions layer il attends to, among n matched tokens with a keep
  // count of k (k <= n; sinks and the recent window are the settings'). Into *out, ascending,
  // distinct, each < n; the pipeline checks. Other selections never call it.
  virtual Status ChoosePositions(int il, int n, int k, const PipelineSettings& s, std::vector<uint32_t>* out) const;

 private:
  const SystemTraits traits_;
};

// The registry. Ids are positions in it: the built-in systems first, in the order SystemKind
// names them, then those registered at run time.
const SystemPolicy& System(SystemKind id);  // an unknown id: ReComp's
std::vector<SystemKind> AllSystems();       // registry order
// Adds a system (e.g. a test's); its name must be new. Returns its id.
Result<SystemKind> RegisterSystem(std::unique_ptr<SystemPolicy> policy);
// Every system's name, joined by `sep` ("recomp|as|...", for help and error messages).
std::string SystemNames(std::string_view sep);

}  // namespace impress

// The registry of serving systems (pipeline/system-policy.h): the built-in systems, one factory
// per system in its own file (pipeline/system-*.cpp), and those registered at run time.
#include <fmt/format.h>

#include <deque>

#include "base/mutex.h"
#include "pipeline/impress-pipeline.h"
#include "pipeline/system-policy.h"

namespace impress {

std::unique_ptr<SystemPolicy> MakeRecompSystem();        // system-recomp.cpp
std::unique_ptr<SystemPolicy> MakeAsLikeSystem();        // system-as-like.cpp
std::unique_ptr<SystemPolicy> MakeAsH2oLruSystem();      // system-as-h2o.cpp
std::unique_ptr<SystemPolicy> MakeAsH2oLfuSystem();      // system-as-h2o.cpp
std::unique_ptr<SystemPolicy> MakeImpressItfSystem();    // system-impress.cpp
std::unique_ptr<SystemPolicy> MakeImpressItfRoSystem();  // system-impress.cpp
std::unique_ptr<SystemPolicy> MakeImpressSystem();       // system-impress.cpp

namespace {

// The built-in systems, in the order of their ids (SystemKind); a new one goes last.
using SystemFactory = std::unique_ptr<SystemPolicy> (*)();
const SystemFactory kBuiltInSystems[] = {
    MakeRecompSystem,        // recomp
    MakeAsLikeSystem,        // as
    MakeAsH2oLruSystem,      // as-h2o-lru
    MakeAsH2oLfuSystem,      // as-h2o-lfu
    MakeImpressItfSystem,    // impress-itf
    MakeImpressItfRoSystem,  // impress-itf-ro
    MakeImpressSystem,       // impress
};

class Registry {
 public:
  Registry() {
    for (SystemFactory make : kBuiltInSystems) systems_.push_back(make());
  }

  const SystemPolicy& Get(SystemKind id) {
    MutexLock l(&mu_);
    const size_t i = size_t(id);
    return i < systems_.size() ? *systems_[i] : *systems_[size_t(SystemKind::kRecomp)];
  }

  std::vector<const SystemPolicy*> List() {
    MutexLock l(&mu_);
    std::vector<const SystemPolicy*> out;
    for (const auto& s : systems_) out.push_back(s.get());
    return out;
  }

  Result<SystemKind> Add(std::unique_ptr<SystemPolicy> p) {
    if (!p || p->name().empty()) return Status::InvalidArgument("a system needs a name");
    MutexLock l(&mu_);
    for (const auto& s : systems_)
      if (s->name() == p->name()) return Status::InvalidArgument(fmt::format("system '{}' exists", p->name()));
    systems_.push_back(std::move(p));
    return SystemKind(systems_.size() - 1);
  }

 private:
  Mutex mu_;
  // Never shrinks: the policies handed out stay valid.
  std::deque<std::unique_ptr<SystemPolicy>> systems_ GUARDED_BY(mu_);
};

Registry& TheRegistry() {
  static Registry* r = new Registry();  // never destroyed: policies outlive every user
  return *r;
}

}  // namespace

LayerSelection SystemPolicy::SelectionFor(const PipelineSettings& s, int il) const {
  if (!reuses()) return LayerSelection::kNone;
  return il < s.dense_layers ? LayerSelection::kWholeLayer : traits_.selection;
}

Status SystemPolicy::ChoosePositions(int, int, int, const PipelineSettings&, std::vector<uint32_t>*) const {
  return Status::Unsupported(fmt::format("system '{}' does not choose positions", name()));
}

const SystemPolicy& System(SystemKind id) { return TheRegistry().Get(id); }

std::vector<SystemKind> AllSystems() {
  std::vector<SystemKind> ids;
  const size_t n = TheRegistry().List().size();
  for (size_t i = 0; i < n; ++i) ids.push_back(SystemKind(i));
  return ids;
}

Result<SystemKind> RegisterSystem(std::unique_ptr<SystemPolicy> policy) { return TheRegistry().Add(std::move(policy)); }

std::string SystemNames(std::string_view sep) {
  std::string out;
  for (const SystemPolicy* s : TheRegistry().List()) {
    if (!out.empty()) out.append(sep);
    out.append(s->name());
  }
  return out;
}

const char* SystemName(SystemKind s) {
  const size_t i = size_t(s);
  const std::vector<const SystemPolicy*> all = TheRegistry().List();
  return i < all.size() ? all[i]->name().c_str() : "?";
}

bool ParseSystem(const std::string& name, SystemKind* out) {
  const std::vector<const SystemPolicy*> all = TheRegistry().List();
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i]->name() == name) {
      *out = SystemKind(i);
      return true;
    }
  }
  return false;
}

}  // namespace impress

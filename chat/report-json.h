// The per-request report as JSON: what `impress generate --json` prints and what the local
// server returns for a request that asks for its report (TTFT breakdown, per-layer selection,
// bytes per tier, decode speed). One shape for every front end.
//
// Pure functions; any thread.
#pragma once

#include <nlohmann/json.hpp>

#include "pipeline/report.h"
#include "store/prefix-store.h"

namespace impress {

nlohmann::json RequestReportJson(const RequestReport& report);
// The TTFT breakdown alone, in ms: match, probe_io, probe_compute, kv_io, copy, compute, io_wait, other,
// and probe_score (the scoring part of probe_compute, not a part of its own).
nlohmann::json TtftBreakdownJson(const TtftBreakdown& breakdown);
// The store's team KV tier: status, fills (hits, tokens, bytes, errors, mean latency), publishing.
nlohmann::json TeamTierJson(const store::TeamTierInfo& team);

}  // namespace impress

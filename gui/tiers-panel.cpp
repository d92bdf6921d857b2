// Tiers panel: per-request device / host / SSD hit rates over time, occupancy against budget,
// bytes read per request, evictions and reorders, and "reorder now".
#include <imgui.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "gui/panels.h"
#include "gui/snapshot-math.h"

namespace impress::gui {

namespace {

void Occupancy(const char* name, uint64_t used, uint64_t budget) {
  const float f = budget ? float(double(used) / double(budget)) : 0.0f;
  ImGui::ProgressBar(std::min(f, 1.0f), ImVec2(-1, 0),
                     fmt::format("{}: {} of {}", name, FormatBytes(used), FormatBytes(budget)).c_str());
}

// The team KV tier (Redis shared by a team): status, what fills brought, what was published.
void TeamRow(const store::TeamTierInfo& t) {
  if (!t.configured) {
    ImGui::TextDisabled("team: off (--team redis://HOST:PORT shares prefix KV with a team)");
    return;
  }
  const ImVec4 col = t.connected ? ImVec4(0.45f, 0.85f, 0.5f, 1) : ImVec4(0.95f, 0.6f, 0.3f, 1);
  ImGui::TextColored(col, "team %s: %s", t.team.c_str(), t.connected ? "connected" : t.status.c_str());
  ImGui::Text(
      "  hits %llu of %llu fills, %llu tokens, %s read, %.1f ms mean | errors %llu (corrupt %llu) | "
      "published %llu spans, %s%s",
      (unsigned long long)t.fill_hits, (unsigned long long)t.fills, (unsigned long long)t.tokens_filled,
      FormatBytes(t.bytes_read).c_str(), t.mean_latency_ms(), (unsigned long long)t.errors,
      (unsigned long long)t.corrupt, (unsigned long long)t.spans_published, FormatBytes(t.bytes_written).c_str(),
      t.publish_queued_bytes ? fmt::format(" ({} queued)", FormatBytes(t.publish_queued_bytes)).c_str() : "");
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s\nprivate documents refused: %llu, queue full: %llu, given up: %llu", t.url.c_str(),
                      (unsigned long long)t.publish_refused_private, (unsigned long long)t.publish_refused_full,
                      (unsigned long long)t.publish_failed);
}

}  // namespace

void DrawTiersPanel(const AppSnapshot& s, TiersPanelState&, UiActions& out) {
  if (s.store_dir.empty()) {
    ImGui::TextDisabled("no KV store (started with --no-store): every request recomputes");
    return;
  }
  const store::StoreStats& st = s.store;
  Occupancy("device", st.tiers.device.used_bytes, st.tiers.device.budget_bytes);
  Occupancy("host", st.tiers.host.used_bytes, st.tiers.host.budget_bytes);
  Occupancy("SSD", st.ssd_disk_bytes + st.catalog_bytes, st.ssd_cap_bytes);
  TeamRow(st.team);
  const HitRates all = StoreHitRates(st.tiers);
  ImGui::Text("all accesses: device %.0f%%  host %.0f%%  SSD %.0f%%  (%llu chunk accesses)", 100 * all.device,
              100 * all.host, 100 * all.ssd, (unsigned long long)all.total);
  ImGui::Text("evictions: device %llu, host %llu, nodes %llu | reorders %llu (%llu segments) | %s%s",
              (unsigned long long)st.tiers.device.evictions, (unsigned long long)st.tiers.host.evictions,
              (unsigned long long)st.nodes_evicted, (unsigned long long)st.reorder_passes,
              (unsigned long long)st.segments_reordered, st.io_engine.c_str(), st.direct_io ? " O_DIRECT" : "");
  ImGui::BeginDisabled(s.phase != WorkerPhase::kIdle);
  if (ImGui::SmallButton("Reorder now")) out.commands.push_back(MakeCommand(Command::Kind::kReorderNow));
  ImGui::EndDisabled();

  // Per request: hit-rate lines (top) and SSD bytes read (bars, bottom).
  const int n = int(s.requests.size());
  if (n == 0) {
    ImGui::TextDisabled("no request yet");
    return;
  }
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float w = std::max(60.0f, avail.x - 10),
              h = std::max(60.0f, avail.y - ImGui::GetTextLineHeightWithSpacing() * 1.2f);
  const float h_lines = h * 0.6f, h_bars = h * 0.4f - 6;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 o = ImGui::GetCursorScreenPos();
  dl->AddRectFilled(o, ImVec2(o.x + w, o.y + h_lines), IM_COL32(25, 25, 30, 255));
  const float step = n > 1 ? w / float(n - 1) : 0;
  auto px = [&](int i) { return n > 1 ? o.x + step * i : o.x + w / 2; };
  auto py = [&](double v) { return o.y + h_lines - float(v) * (h_lines - 2) - 1; };
  const ImU32 cols[3] = {IM_COL32(80, 200, 110, 255), IM_COL32(90, 160, 240, 255), IM_COL32(240, 120, 60, 255)};
  for (int i = 0; i < n; ++i) {
    const HitRates a = RequestHitRates(s.requests[i]->report);
    const double va[3] = {a.device, a.host, a.ssd};
    for (int k = 0; k < 3; ++k) {
      dl->AddCircleFilled(ImVec2(px(i), py(va[k])), 3, cols[k]);
      if (i > 0) {
        const HitRates b = RequestHitRates(s.requests[i - 1]->report);
        const double vb[3] = {b.device, b.host, b.ssd};
        dl->AddLine(ImVec2(px(i - 1), py(vb[k])), ImVec2(px(i), py(va[k])), cols[k], 2.0f);
      }
    }
  }
  dl->AddText(ImVec2(o.x + 4, o.y + 2), cols[0], "device");
  dl->AddText(ImVec2(o.x + 64, o.y + 2), cols[1], "host");
  dl->AddText(ImVec2(o.x + 114, o.y + 2), cols[2], "SSD (share of chunks per request)");
  const float yb = o.y + h_lines + 6;
  uint64_t max_bytes = 1;
  for (const auto& r : s.requests) max_bytes = std::max<uint64_t>(max_bytes, r->report.ssd_bytes_read);
  const float bw = w / float(n);
  for (int i = 0; i < n; ++i) {
    const float bh = float(double(s.requests[i]->report.ssd_bytes_read) / double(max_bytes)) * h_bars;
    dl->AddRectFilled(ImVec2(o.x + i * bw + 1, yb + h_bars - bh), ImVec2(o.x + (i + 1) * bw - 1, yb + h_bars),
                      IM_COL32(240, 120, 60, 200));
  }
  dl->AddText(ImVec2(o.x + 4, yb), IM_COL32(220, 220, 220, 255),
              fmt::format("SSD bytes read per request (max {})", FormatBytes(max_bytes)).c_str());
  ImGui::InvisibleButton("##tiers", ImVec2(w, h));
  if (ImGui::IsItemHovered()) {
    const float mx = ImGui::GetIO().MousePos.x - o.x;
    const int i = std::clamp(n > 1 ? int(mx / step + 0.5f) : 0, 0, n - 1);
    const RequestRecord& r = *s.requests[i];
    const HitRates a = RequestHitRates(r.report);
    ImGui::SetTooltip(
        "%s\nchunks: device %u (%.0f%%), host %u (%.0f%%), SSD %u (%.0f%%)\nSSD read %s, read amplification %.2fx",
        r.label.c_str(), r.report.chunks_device, 100 * a.device, r.report.chunks_host, 100 * a.host,
        r.report.chunks_ssd, 100 * a.ssd, FormatBytes(r.report.ssd_bytes_read).c_str(), r.report.read_amplification());
  }
}

}  // namespace impress::gui

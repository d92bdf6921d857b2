// The GUI's panels: one function (and one file) per panel. Each draws into the current ImGui
// window from an immutable snapshot and its own state struct, and reports what the user asked
// for in UiActions; it never calls the engine. The frame loop (gui/app-window.cpp) forwards the
// actions to the worker.
//
// Thread contract: UI thread only (ImGui is single-threaded); states are owned by the caller.
#pragma once

#include <string>
#include <vector>

#include "chat/model-library.h"
#include "gui/app-snapshot.h"
#include "gui/model-downloads.h"
#include "gui/worker.h"

namespace impress::gui {

// What a frame's panels want done.
struct UiActions {
  std::vector<Command> commands;  // sent to the worker in order
  bool stop = false;              // cancel the request in flight
  std::string pull_model;         // start downloading this known model (gui/model-downloads.h)
  bool cancel_pull = false;       // cancel the download in flight
};

struct ChatPanelState {
  std::string input;
  size_t last_chat_size = 0;
  size_t last_text_size = 0;
  bool focus_input = true;
  std::string rename;  // the rename popup's text
};

struct DocumentsPanelState {
  std::string path_input;
};

struct ImportancePanelState {
  int request = -1;  // index into snapshot.requests; -1 = the latest
  bool outline_selected = true;
  bool show_chunks = true;
  bool compare = false;      // draw a second request's heatmap below (before/after a reorder)
  int compare_request = -1;  // index into snapshot.requests; -1 = the one before `request`
};

struct SimilarityPanelState {
  int request = -1;  // -1 = the latest
  int history = 8;   // recent requests drawn as faint lines
};

// The model picker (gui/model-picker.cpp): the model row and its "Open model" dialog with a
// file browser of its own.
struct ModelPickerState {
  bool open_requested = false;
  std::string dir;       // the folder listed (empty: the loaded model's folder)
  std::string filter;    // part of a name
  std::string selected;  // a .gguf file or a Hugging Face folder
  std::string estimate_for;
  std::string estimate_text, estimate_error;  // the selection's RAM estimate, or why there is none
  bool fits = false;
  double estimated_at = -1;  // ImGui time of the estimate (MemAvailable is read again every 2 s)
  // The model library (chat/model-library.h), filled by the frame loop: the known models, the
  // folder they go to, and the download in flight.
  ModelCatalog catalog;
  std::string catalog_error;
  std::string models_dir;
  DownloadStatus download;
};

struct TiersPanelState {};
struct TtftPanelState {
  int max_bars = 12;
};
struct TreePanelState {};

struct SettingsPanelState {
  TuningSettings edit;          // what the widgets show
  uint64_t synced_version = 0;  // snapshot version edit was taken from (0: take it now)
};

// All panel state of the window, owned by the frame loop (never static).
struct UiState {
  ChatPanelState chat;
  DocumentsPanelState documents;
  ImportancePanelState importance;
  SimilarityPanelState similarity;
  TiersPanelState tiers;
  TtftPanelState ttft;
  TreePanelState tree;
  SettingsPanelState settings;
  ModelPickerState model;
  int inspector_tab = 0;  // which inspector tab to select next frame (-1: leave as is)
};

void DrawChatPanel(const AppSnapshot& s, ChatPanelState& st, UiActions& out);
void DrawDocumentsPanel(const AppSnapshot& s, DocumentsPanelState& st, UiActions& out);
void DrawImportancePanel(const AppSnapshot& s, ImportancePanelState& st);
void DrawSimilarityPanel(const AppSnapshot& s, SimilarityPanelState& st);
void DrawTiersPanel(const AppSnapshot& s, TiersPanelState& st, UiActions& out);
void DrawTtftPanel(const AppSnapshot& s, TtftPanelState& st);
void DrawTreePanel(const AppSnapshot& s, TreePanelState& st);
void DrawSettingsPanel(const AppSnapshot& s, SettingsPanelState& st, UiActions& out);
// The loaded model (name elided, path on hover) with an "Open model..." button and its dialog.
void DrawModelPicker(const AppSnapshot& s, ModelPickerState& st, UiActions& out);

// Inspector tabs, in order (the script's `tab NAME` uses these names, lower-case).
const std::vector<std::string>& InspectorTabNames();
// The whole window's layout: chat, documents + settings, inspector tabs and a status bar.
void DrawAllPanels(const AppSnapshot& s, UiState& ui, UiActions& out);

// Shared drawing helpers (gui/plot-draw.cpp).
namespace draw {
// The latest request, or requests[index] when index is valid; null when there is none.
const RequestRecord* PickRequest(const AppSnapshot& s, int index);
// Colour (ImU32) for value v in [0, 1] on a dark-blue -> yellow ramp.
unsigned HeatColour(float v);
// Colours of the TTFT parts (index as TtftPartNames()).
unsigned PartColour(int part);
// A combo to pick a request (-1 = latest).
void RequestPicker(const char* label, const AppSnapshot& s, int* index);
// `text` cut to fit `width` pixels (<= 0: the rest of the line) with "..." in the middle
// (gui/text-format.h); on hover a tooltip with the full text, or with `tooltip` when given.
void TextElided(const std::string& text, float width = 0, const std::string& tooltip = {});
}  // namespace draw

}  // namespace impress::gui

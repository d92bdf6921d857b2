// Where the GUI keeps its files and how its settings are saved: $XDG_CONFIG_HOME/impress/
// (~/.config/impress/) holds gui.json (the tuning knobs), imgui.ini (window layout) and
// models.json (recently loaded models, gui/model-info.h).
//
// Thread contract: pure functions over files; call from one thread at a time per file.
#pragma once

#include <string>

#include "base/status.h"
#include "gui/app-snapshot.h"

namespace impress::gui {

// $XDG_CONFIG_HOME/impress, else $HOME/.config/impress (not created here).
std::string DefaultConfigDir();

// Settings from JSON text. Unknown keys are ignored; a known key with a wrong type or an
// out-of-range value is InvalidArgument naming the key. Missing keys keep `defaults`.
Result<TuningSettings> ParseTuning(const std::string& json_text, const TuningSettings& defaults);
std::string TuningToJson(const TuningSettings& s);

// Reads `path`; a missing file gives `defaults` (first start). Errors name the file.
Result<TuningSettings> LoadTuning(const std::string& path, const TuningSettings& defaults);
// Writes atomically (temp file + rename), creating the directory.
Status SaveTuning(const std::string& path, const TuningSettings& s);

}  // namespace impress::gui

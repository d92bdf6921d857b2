// Text the panels show: sizes in MiB/GiB without trailing decimals, and text cut to a width
// with "..." (document names, model paths) whose full form the panel shows on hover.
// Pure functions (the width of a piece of text is the caller's measure), so they are tested
// without a window; draw::TextElided (gui/panels.h) is the ImGui side.
//
// Thread contract: pure functions, any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace impress::gui {

// A budget in MiB as a person reads it: "0 MiB", "256 MiB", "1.5 GiB", "16 GiB", "1.25 TiB"
// (at most two decimals, trailing zeros dropped; below 1 MiB: "0.5 MiB").
std::string FormatMib(double mib);

// Width of a piece of text in the caller's units (pixels for ImGui, characters in tests).
using TextWidthFn = std::function<float(std::string_view)>;

// `text` if it fits in max_width, else its start and end around "..." so that it fits: the end
// is kept longer (a path's file name, a document's extension). Cuts fall on UTF-8 character
// boundaries. Returns "..." alone when not even that fits.
std::string ElideMiddle(std::string_view text, float max_width, const TextWidthFn& width);

}  // namespace impress::gui

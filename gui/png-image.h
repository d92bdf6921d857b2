// PNG files for screenshots (write) and for tests that check them (read), through stb
// (libstb-dev). RGBA8 pixels, rows top to bottom.
//
// Thread contract: pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace impress::gui {

struct RgbaImage {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;  // width * height * 4
};

Status WritePng(const std::string& path, const RgbaImage& image);
Result<RgbaImage> ReadPng(const std::string& path);

// How much of a picture is not background: distinct colours (RGB) and the share of pixels that
// differ from the most common colour. A blank (or single-colour) frame has 1 and 0.
struct ImageContent {
  size_t distinct_colours = 0;
  double non_background = 0;  // fraction in [0, 1]
};
ImageContent MeasureContent(const RgbaImage& image);

}  // namespace impress::gui

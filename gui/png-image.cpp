#include "gui/png-image.h"

#include <stb_image.h>
#include <stb_image_write.h>

#include <algorithm>
#include <filesystem>
#include <unordered_map>

namespace impress::gui {

Status WritePng(const std::string& path, const RgbaImage& im) {
  if (im.width <= 0 || im.height <= 0 || im.pixels.size() != size_t(im.width) * im.height * 4)
    return Status::InvalidArgument("screenshot " + path + ": bad image size");
  std::error_code ec;
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (!stbi_write_png(path.c_str(), im.width, im.height, 4, im.pixels.data(), im.width * 4))
    return Status::IOError("cannot write PNG " + path);
  return Status::Ok();
}

Result<RgbaImage> ReadPng(const std::string& path) {
  int w = 0, h = 0, n = 0;
  unsigned char* data = stbi_load(path.c_str(), &w, &h, &n, 4);
  if (!data)
    return Status::InvalidArgument("cannot decode image " + path + ": " +
                                   (stbi_failure_reason() ? stbi_failure_reason() : "?"));
  RgbaImage im;
  im.width = w;
  im.height = h;
  im.pixels.assign(data, data + size_t(w) * h * 4);
  stbi_image_free(data);
  return im;
}

ImageContent MeasureContent(const RgbaImage& im) {
  ImageContent c;
  const size_t n = size_t(im.width) * im.height;
  if (n == 0 || im.pixels.size() < n * 4) return c;
  std::unordered_map<uint32_t, size_t> counts;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = &im.pixels[i * 4];
    counts[uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2]]++;
  }
  size_t most = 0;
  for (const auto& [colour, k] : counts) most = std::max(most, k);
  c.distinct_colours = counts.size();
  c.non_background = double(n - most) / double(n);
  return c;
}

}  // namespace impress::gui

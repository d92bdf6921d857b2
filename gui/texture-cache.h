// Textures for pictures the panels build on the CPU (the importance heatmap), cached by a key
// the panel chooses (request, size, options), so a picture is built and uploaded only when its
// key changes, and each frame draws it as one textured quad.
//
// Panels reach the provider through CurrentTextures(): the frame loop (gui/app-window.cpp)
// installs an OpenGL cache; tests and any context without a renderer leave it null, and the
// panels then draw without textures.
//
// Thread contract: UI thread only (the GL context must be current on it). The current provider
// is per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "gui/png-image.h"

namespace impress::gui {

class TextureProvider {
 public:
  virtual ~TextureProvider() = default;
  // The texture (an ImTextureID) holding key's picture. make() runs, and its picture is
  // uploaded, only when the key is not cached. Null when the picture is empty or the upload failed.
  virtual void* Texture(const std::string& key, const std::function<RgbaImage()>& make) = 0;
};

// The provider panels use on this thread; null: none (draw without textures).
TextureProvider* CurrentTextures();
void SetCurrentTextures(TextureProvider* p);

// OpenGL textures (GL_RGBA8, nearest filtering: a heatmap cell stays a crisp block). Entries
// not asked for during `keep_frames` frames are deleted at EndFrame. Create and destroy it
// while the GL context is current.
class GlTextureCache : public TextureProvider {
 public:
  explicit GlTextureCache(int keep_frames = 120) : keep_frames_(keep_frames) {}
  ~GlTextureCache() override;
  GlTextureCache(const GlTextureCache&) = delete;
  GlTextureCache& operator=(const GlTextureCache&) = delete;

  void* Texture(const std::string& key, const std::function<RgbaImage()>& make) override;
  void EndFrame();
  uint64_t uploads() const { return uploads_; }
  double upload_ms() const { return upload_ms_; }  // building + uploading, all uploads together
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    unsigned texture = 0;
    uint64_t last_used = 0;
  };
  std::unordered_map<std::string, Entry> entries_;
  uint64_t frame_ = 0;
  uint64_t uploads_ = 0;
  double upload_ms_ = 0;
  int keep_frames_;
};

}  // namespace impress::gui

#include "gui/texture-cache.h"

#include <GL/gl.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>

namespace impress::gui {

namespace {
thread_local TextureProvider* g_current = nullptr;
}  // namespace

TextureProvider* CurrentTextures() { return g_current; }
void SetCurrentTextures(TextureProvider* p) { g_current = p; }

GlTextureCache::~GlTextureCache() {
  for (auto& [key, e] : entries_) glDeleteTextures(1, &e.texture);
}

void* GlTextureCache::Texture(const std::string& key, const std::function<RgbaImage()>& make) {
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    it->second.last_used = frame_;
    return reinterpret_cast<void*>(uintptr_t(it->second.texture));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const RgbaImage im = make();
  if (im.width <= 0 || im.height <= 0 || im.pixels.size() < size_t(im.width) * im.height * 4) return nullptr;
  GLint max_size = 0;
  glGetIntegerv(GL_MAX_TEXTURE_SIZE, &max_size);
  if (im.width > max_size || im.height > max_size) {
    spdlog::debug("texture {}: {}x{} is over GL_MAX_TEXTURE_SIZE {}", key, im.width, im.height, max_size);
    return nullptr;
  }
  while (glGetError() != GL_NO_ERROR) {
  }  // errors from earlier calls are not this upload's
  GLint last = 0;
  glGetIntegerv(GL_TEXTURE_BINDING_2D, &last);
  GLuint tex = 0;
  glGenTextures(1, &tex);
  glBindTexture(GL_TEXTURE_2D, tex);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
  glPixelStorei(GL_UNPACK_ALIGNMENT, 1);
  glPixelStorei(GL_UNPACK_ROW_LENGTH, 0);
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, im.width, im.height, 0, GL_RGBA, GL_UNSIGNED_BYTE, im.pixels.data());
  glBindTexture(GL_TEXTURE_2D, GLuint(last));
  if (const GLenum err = glGetError(); err != GL_NO_ERROR) {
    spdlog::debug("texture {}: glTexImage2D failed ({:#x})", key, unsigned(err));
    glDeleteTextures(1, &tex);
    return nullptr;
  }
  ++uploads_;
  upload_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  spdlog::debug("texture {}: {}x{} uploaded", key, im.width, im.height);
  entries_[key] = {tex, frame_};
  return reinterpret_cast<void*>(uintptr_t(tex));
}

void GlTextureCache::EndFrame() {
  ++frame_;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (frame_ - it->second.last_used > uint64_t(keep_frames_)) {
      glDeleteTextures(1, &it->second.texture);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace impress::gui

// JSON files of a model folder: see json-file.h.
#include "engine/model/json-file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "engine/model/mapped-file.h"
#include "engine/model/quote.h"

namespace impress {

using json = nlohmann::json;

Result<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes) {
  uint64_t size = 0;
  IMPRESS_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &size));
  if (size > max_bytes) {
    ::close(fd);
    return Status::ResourceExhausted(path + ": " + std::to_string(size) + " bytes, more than the limit of " +
                                     std::to_string(max_bytes));
  }
  std::string out(size_t(size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      ::close(fd);
      return Status::IOError(path + ": read failed at byte " + std::to_string(done) +
                             (err ? std::string(": ") + std::strerror(err) : std::string(": file shrank")));
    }
    done += size_t(n);
  }
  ::close(fd);
  return out;
}

Result<json> ParseJsonStrict(std::string_view text, const std::string& source) {
  // One set of keys per open object; the first duplicate found is reported.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (!duplicate.empty()) return true;
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end && !open_objects.empty()) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty() && parsed.is_string()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(k).second) duplicate = k;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
  } catch (const std::exception& e) {  // defensive: nothing may escape the module
    return Status::Corruption(source + ": not valid JSON (" + e.what() + ")");
  }
  if (j.is_discarded()) return Status::Corruption(source + ": not valid JSON");
  if (!duplicate.empty()) {
    return Status::Corruption(source + ": key " + Quote(duplicate) + " appears twice in one object");
  }
  return j;
}

Result<json> ReadJsonFile(const std::string& path, uint64_t max_bytes) {
  IMPRESS_ASSIGN_OR_RETURN(const std::string text, ReadRegularFile(path, max_bytes));
  return ParseJsonStrict(text, path);
}

}  // namespace impress

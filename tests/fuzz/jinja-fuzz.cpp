// libFuzzer target: the Jinja chat-template interpreter on hostile templates (a model's
// tokenizer.chat_template is untrusted metadata). The input is the template source; after a NUL
// byte, the rest is the text of the user's message (data, never markup).
// What must hold: Parse fails with a Status or gives a template; Render fails with a Status or
// gives text; the same render twice gives the same text and data ranges; the data ranges are
// sorted, disjoint, non-empty and inside the text. Never a crash, a hang or an absurd allocation
// (the interpreter bounds nesting, loop lengths and output size).
//
// Single-threaded harness.
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/jinja.h"

namespace jinja = impress::jinja;

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "jinja-fuzz: %s\n", what.c_str());
  std::fflush(stderr);
  __builtin_trap();
}

jinja::Value Message(const char* role, std::string content) {
  return jinja::Value::MakeDict(
      {{"role", jinja::Value::Str(role)}, {"content", jinja::Value::Data(std::move(content))}});
}

// What a chat template is rendered with: a short conversation whose contents are data.
jinja::Dict Globals(std::string user_text) {
  jinja::List messages;
  messages.push_back(Message("system", "Answer from the document."));
  messages.push_back(Message("user", std::move(user_text)));
  messages.push_back(Message("assistant", "{{ not markup }} <|im_end|>"));
  return {{"messages", jinja::Value::MakeList(std::move(messages))},
          {"bos_token", jinja::Value::Str("<s>")},
          {"eos_token", jinja::Value::Str("</s>")},
          {"add_generation_prompt", jinja::Value::Bool(true)}};
}

void CheckRanges(const std::string& text, const std::vector<impress::ByteRange>& data) {
  size_t last_end = 0;
  for (const impress::ByteRange& r : data) {
    if (r.begin >= r.end) Fail("an empty or inverted data range");
    if (r.end > text.size()) Fail("a data range past the end of the text");
    if (r.begin < last_end) Fail("data ranges not sorted and disjoint");
    last_end = r.end;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  const std::string_view input(reinterpret_cast<const char*>(bytes), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  const std::string user =
      nul == std::string_view::npos ? "What does the licence say?" : std::string(input.substr(nul + 1));

  auto t = jinja::Template::Parse(source);
  if (!t.ok()) return 0;
  const jinja::Dict globals = Globals(user);
  std::vector<impress::ByteRange> data1, data2;
  auto r1 = t->Render(globals, &data1);
  auto r2 = t->Render(globals, &data2);
  if (r1.ok() != r2.ok()) Fail("the same render succeeded once and failed once");
  if (!r1.ok()) return 0;
  if (*r1 != *r2) Fail("the same render gave two texts");
  if (data1.size() != data2.size()) Fail("the same render gave two sets of data ranges");
  for (size_t i = 0; i < data1.size(); ++i)
    if (data1[i].begin != data2[i].begin || data1[i].end != data2[i].end)
      Fail("the same render gave two sets of data ranges");
  CheckRanges(*r1, data1);
  return 0;
}

// Operations on Jinja values shared by the evaluator (jinja-eval.cpp): Python's str()/repr(),
// equality and ordering, JSON as transformers' tojson writes it, and strings that carry the
// byte ranges they hold of the caller's data. Private to the interpreter; pure functions,
// callable from any thread. Errors are JinjaError (jinja-ast.h).
#pragma once

#include <cstdint>
#include <string>

#include "engine/tokenizer/jinja-ast.h"

namespace impress::jinja {

// The longest string a template may build; longer is a JinjaError. A prompt that long would be
// millions of tokens, far past any model's context.
constexpr size_t kMaxStringBytes = size_t(16) << 20;

// a + b for strings, the data ranges carried along.
Value Concat(const Value& a, const Value& b);
// *a += b for strings, the data ranges carried along: building a string piece by piece stays linear.
void Append(Value* a, const Value& b);
// Python's str * int, the data ranges carried along; n <= 0 gives "".
Value Repeat(const Value& a, int64_t n);
// a.s[begin, end) with the data ranges inside it.
Value Substr(const Value& a, size_t begin, size_t end);
// A string computed from `from` in a way that does not keep positions (upper, replace, ...):
// all data when any of `from` was.
Value Derived(std::string text, const Value& from);
// Python's str() (a string: itself, ranges kept) and repr().
Value ToStr(const Value& v);
std::string Repr(const Value& v);

bool IsNumber(const Value& v);  // int, float or bool
int64_t AsInt(const Value& v);
double AsDouble(const Value& v);
bool Equal(const Value& a, const Value& b);
// -1, 0, 1 as Python's < on numbers, strings or lists; JinjaError for other kinds.
int Compare(const Value& a, const Value& b);

// json.dumps(v, ensure_ascii=False, indent=indent or None when < 0), insertion order.
std::string ToJson(const Value& v, int indent);

// UTF-8 helpers: the code point at *i (advanced; an invalid byte is one code point).
uint32_t NextCodepoint(const std::string& s, size_t* i);
size_t CodepointCount(const std::string& s);
bool IsPyWhitespace(uint32_t c);  // str.isspace() of one code point
// Python's str.strip/lstrip/rstrip: Unicode whitespace, or the code points of `chars`.
Value Strip(const Value& v, bool left, bool right, const Value* chars = nullptr);

}  // namespace impress::jinja

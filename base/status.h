// Status and Result<T>: how errors cross module boundaries in IMPRESS.
//
// A Status is either OK or a code plus a message that carries its context (file, tensor,
// offset, what was expected). Result<T> holds a T or a non-OK Status. Both are plain values,
// safe to move between threads; nothing here throws.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace impress {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,    // the caller passed something unusable
    kNotFound,           // a file, key or tensor does not exist
    kCorruption,         // a file's contents are inconsistent (bad magic, checksum, bounds)
    kUnsupported,        // valid, but this build cannot handle it (tensor type, architecture)
    kIOError,            // the operating system refused (read, write, fsync, disk full)
    kOutOfRange,         // e.g. prompt longer than the context
    kResourceExhausted,  // a budget or memory limit
    kCancelled,          // the user stopped it
    kInternal,           // a bug: an invariant did not hold
    kDataLoss,           // data in use changed underneath (a model file truncated or rewritten while mapped)
  };

  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status Unsupported(std::string m) { return {Code::kUnsupported, std::move(m)}; }
  static Status IOError(std::string m) { return {Code::kIOError, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
  static Status Cancelled(std::string m) { return {Code::kCancelled, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
  static Status DataLoss(std::string m) { return {Code::kDataLoss, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  static const char* CodeName(Code c) {
    switch (c) {
      case Code::kOk: return "OK";
      case Code::kInvalidArgument: return "invalid argument";
      case Code::kNotFound: return "not found";
      case Code::kCorruption: return "corruption";
      case Code::kUnsupported: return "unsupported";
      case Code::kIOError: return "I/O error";
      case Code::kOutOfRange: return "out of range";
      case Code::kResourceExhausted: return "resource exhausted";
      case Code::kCancelled: return "cancelled";
      case Code::kInternal: return "internal error";
      case Code::kDataLoss: return "data loss";
    }
    return "unknown";
  }
  std::string ToString() const { return ok() ? "OK" : std::string(CodeName(code_)) + ": " + message_; }

  // Prefixes context to a failed status: st.WithContext("model.gguf") -> "model.gguf: ...".
  Status WithContext(const std::string& ctx) const { return ok() ? *this : Status(code_, ctx + ": " + message_); }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                                              // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace impress

// Returns early from the enclosing function when `expr` (a Status) is not OK.
#define IMPRESS_RETURN_IF_ERROR(expr) \
  do {                                \
    ::impress::Status _st = (expr);   \
    if (!_st.ok()) return _st;        \
  } while (0)

#define IMPRESS_CONCAT_INNER(a, b) a##b
#define IMPRESS_CONCAT(a, b) IMPRESS_CONCAT_INNER(a, b)
// IMPRESS_ASSIGN_OR_RETURN(auto x, MakeX()); declares x from a Result or returns its Status.
#define IMPRESS_ASSIGN_OR_RETURN(lhs, expr)                                                   \
  auto IMPRESS_CONCAT(_res_, __LINE__) = (expr);                                              \
  if (!IMPRESS_CONCAT(_res_, __LINE__).ok()) return IMPRESS_CONCAT(_res_, __LINE__).status(); \
  lhs = std::move(IMPRESS_CONCAT(_res_, __LINE__)).value()

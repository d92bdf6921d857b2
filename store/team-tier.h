// TeamTier: the team KV tier, a remote tier below the SSD on Redis (docs/team-tier.md), shared
// by the desktops of a team so one computes a document's KV and the others read it.
//
// What a remote chunk is: the token sequence is cut into spans of `span_tokens` tokens from
// position 0 (the last span of a publish may be shorter). A span is named by the hash chain of
// the prefix it ends: chain_0 = XXH3-128 of the model key (fingerprint, geometry, encodings,
// probe heads, span length), chain_{i+1} = XXH3-128(chain_i, tokens of span i). Per span:
//   descriptor  <model>:{<chain_{i+1}>}:d            the span's exact tokens, chain_i and
//               chain_{i+1}, a publish id, and per layer the length, 4 KiB block sums and
//               checksum of each value below; its own XXH3-64 at the end.
//   KV value    <model>:{<chain_{i+1}>}:<id>:k<layer> a kKV chunk (store/chunk-format.h),
//               bytes exactly as EncodeChunk lays them out: node_id = low half of chain_{i+1},
//               index = span, slot_begin = the span's first position, original order.
//   probe value <model>:{<chain_{i+1}>}:<id>:p<layer> a kProbe chunk of the probe heads' keys.
// Keys carry the namespace prefix "impress:<team>:" (RedisClient puts it on), so two teams on
// one Redis never see each other; the hash tag {chain} keeps a span's pieces on one cluster node.
//
// Consistency: a publisher writes the values first and the descriptor last, so a descriptor
// names values that were whole when it was written; the publish id keeps two desktops that
// publish the same span from mixing their values. A lookup (LongestPrefix) walks the chain of
// the query and accepts a span only when its descriptor decodes, its checksum holds, it names
// the same model, span index and chain link, and its tokens equal the query's exactly; the walk
// stops at the first span that fails. Every value is verified before use (the whole chunk, or
// the 4 KiB blocks a range read covers, against the descriptor's block sums): a key evicted, a
// half-written or corrupted value, another model's or another prefix's bytes is a miss (and
// counted), never returned. Network failures come back as kIOError; callers fall back to the
// local tiers or recompute.
//
// TeamPublisher publishes in the background: Submit copies the KV into a bounded queue and
// returns at once (a full queue or a private document: refused and counted); one thread encodes
// and writes, and when Redis is unreachable keeps the job and tries again later, pausing longer
// each time (up to retry_max).
//
// Thread contract: TeamTier is internally synchronized (its RedisClient serializes requests;
// counters are atomic): any thread may call any method. TeamPublisher's methods may be called
// from any thread; its own thread owns a second TeamTier, so a publish waiting on Redis never
// holds up a lookup.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/chunk-format.h"
#include "store/kv-codec.h"
#include "store/prefix-store.h"
#include "store/redis-client.h"

namespace impress::store {

// What the KV is of. Desktops share KV only when all of it agrees (it makes the model key).
struct TeamModel {
  std::string fingerprint;
  int n_layer = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  KVEncoding kv_encoding = KVEncoding::kF16;
  KVEncoding probe_encoding = KVEncoding::kF16;
  std::vector<int> probe_kv_heads = {0};
  int span_tokens = 64;
};

using TeamHash = std::array<uint64_t, 2>;  // XXH3-128: low, high

// The chain hash of the prefix before span 0, and through one more span.
TeamHash TeamChainSeed(const TeamModel& m);
TeamHash TeamChainNext(const TeamHash& prev, std::span<const Token> span_tokens);
std::string TeamHashHex(const TeamHash& h);  // 32 hex digits

enum class TeamPiece { kKV, kProbe };

struct TeamDescriptor {
  uint64_t model_hash = 0;  // of the model key
  uint32_t span = 0;        // tokens [span * span_tokens, + tokens.size())
  TeamHash prev{};          // chain before the span
  TeamHash chain{};         // chain through it (names the keys)
  uint64_t publish_id = 0;  // names the values
  std::vector<Token> tokens;
  std::vector<ChunkExtent> kv;     // [layer]: length, slot range, block sums, checksum
  std::vector<ChunkExtent> probe;  // [layer]
  // The publisher's write order (empty when it sent none): for each token of the span, the
  // sequence position where the publisher's segment holding it begins, and per layer the token's
  // slot in that segment. A store that fills from the team tier writes each such segment in this
  // slot order, so its chunks and read groups are the publisher's.
  std::vector<uint32_t> order_segment;            // [token]
  std::vector<std::vector<uint32_t>> order_slot;  // [layer][token]
  // Whether each layer's KV value holds the span's rows in that write order (sorted by segment,
  // then slot; descriptor version 3) rather than in token order: a run of the publisher's slots,
  // which the default block-group selection reads, is then a run of bytes. Set by
  // SetRowsInWriteOrder, which also fills `row`.
  bool rows_in_order = false;
  std::vector<std::vector<uint32_t>> row;  // [layer][token]: the token's row in the value
  uint32_t Row(uint32_t layer, uint32_t token) const { return rows_in_order ? row[layer][token] : token; }
};

// Orders the rows of `d`'s KV values by its write order (TeamDescriptor::rows_in_order); false
// when it carries none.
bool SetRowsInWriteOrder(TeamDescriptor* d);

// A write order to publish with KV (TeamDescriptor::order_segment / order_slot), for the tokens
// [start, tokens.size()) that EncodeSpans and TeamPublisher::Submit take. Empty: none.
struct TeamOrder {
  std::vector<uint32_t> segment;            // [token - start]
  std::vector<std::vector<uint32_t>> slot;  // [layer][token - start]
  bool empty() const { return segment.empty(); }
};

std::string EncodeTeamDescriptor(const TeamDescriptor& d);
// Checks the checksum and every length against the bytes; kCorruption when anything is off.
Result<TeamDescriptor> DecodeTeamDescriptor(const std::string& bytes);

// One span ready to write: its descriptor and values.
struct TeamSpan {
  TeamDescriptor desc;
  std::vector<std::string> kv;     // [layer] chunk bytes
  std::vector<std::string> probe;  // [layer]
};

// One value to read: a span's descriptor and a layer.
struct TeamChunkRef {
  const TeamDescriptor* desc = nullptr;
  uint32_t layer = 0;
};

// Rows of one span to read: token offsets in the span (TeamTier::ReadRowsMany maps them to the
// value's rows).
struct TeamRowsRef {
  const TeamDescriptor* desc = nullptr;
  std::span<const uint32_t> rows;
};

struct TeamMatch {
  uint64_t n_matched = 0;             // tokens of the query the team tier holds
  std::vector<TeamDescriptor> spans;  // spans 0.. of the match
};

struct TeamStats {
  uint64_t lookups = 0;
  uint64_t spans_hit = 0;      // spans a lookup accepted
  uint64_t misses = 0;         // lookups or reads that found nothing usable
  uint64_t corrupt = 0;        // values or descriptors that failed verification (also misses)
  uint64_t errors = 0;         // requests the network or the server failed
  uint64_t reads = 0;          // value reads (whole or by range) that returned verified bytes
  uint64_t bytes_read = 0;     // bytes received for values and descriptors
  uint64_t bytes_written = 0;  // bytes of values and descriptors written
  uint64_t spans_published = 0;
  uint64_t spans_present = 0;  // spans a publish found there already
  uint64_t request_us = 0;     // total time of lookups and reads
  uint64_t max_request_us = 0;
};

struct TeamTierOptions {
  RedisOptions redis;  // host, port, credentials, timeouts; key_prefix is set from `team`
  std::string team;    // the namespace: 1-64 of [A-Za-z0-9._-]
  TeamModel model;
  std::chrono::seconds ttl = std::chrono::seconds(0);  // 0: keys do not expire
};

// "redis://host:port" or "rediss://host:port" (TLS; the files in RedisOptions::tls_files) into
// options. A URL that carries a password is refused: it would show on the command line.
Status ParseTeamUrl(const std::string& url, RedisOptions* out);
// The user and password from a file (first line the user, second the password; one line: the
// password alone), else from IMPRESS_TEAM_USER / IMPRESS_TEAM_PASSWORD. Nothing given: no AUTH.
Status LoadTeamCredentials(const std::string& file, RedisOptions* out);

class TeamTier {
 public:
  static Result<std::unique_ptr<TeamTier>> Open(const TeamTierOptions& options);

  // The spans of `tokens` whose KV is given: fp16 K/V of tokens [start, tokens.size()) per layer
  // (as PrefixStore::Insert takes them). Only spans that begin at or after `start` are made.
  // `order` (optional) is the write order the descriptors carry.
  Result<std::vector<TeamSpan>> EncodeSpans(std::span<const Token> tokens, uint64_t start,
                                            std::span<const LayerKV> layers, uint64_t publish_id,
                                            const TeamOrder& order = {}) const;
  // Writes the spans (values, then descriptors); spans whose descriptor is there already are
  // skipped. kIOError when Redis failed: calling again finishes the job.
  Status Publish(const std::vector<TeamSpan>& spans);

  // The longest prefix of `tokens` the team tier holds, whole spans (see above).
  Result<TeamMatch> LongestPrefix(std::span<const Token> tokens);

  // One value, verified whole (kNotFound when gone, kCorruption when it does not verify).
  Result<std::vector<uint8_t>> ReadChunk(const TeamDescriptor& d, uint32_t layer, TeamPiece piece);
  // Several values in one pipelined request, each verified whole as ReadChunk does; one result
  // per reference, in order.
  std::vector<Result<std::vector<uint8_t>>> ReadChunks(std::span<const TeamChunkRef> refs, TeamPiece piece);
  // The records of the given rows (token offsets in the span) of one layer's K (or V) region,
  // row after row: GETRANGE of the 4 KiB blocks they lie in, pipelined, each block verified.
  Result<std::vector<uint8_t>> ReadRows(const TeamDescriptor& d, uint32_t layer, bool v_region,
                                        std::span<const uint32_t> rows);
  // The same for rows of several spans of one layer, K and/or V, in one pipelined request (one
  // round trip however many spans): per reference the K records then the V records wanted, row
  // after row; one result per reference, in order.
  std::vector<Result<std::vector<uint8_t>>> ReadRowsMany(std::span<const TeamRowsRef> refs, uint32_t layer, bool want_k,
                                                         bool want_v);
  // Raw byte ranges of any key of this namespace (GETRANGE, pipelined; nothing verified).
  std::vector<Result<std::string>> ReadRanges(const std::string& key, std::span<const RedisClient::ByteRange> ranges);

  std::string DescriptorKey(const TeamHash& chain) const;
  std::string ValueKey(const TeamDescriptor& d, uint32_t layer, TeamPiece piece) const;
  // The header a value of `d` must have (VerifyChunk's `expect`).
  ChunkHeader ExpectedHeader(const TeamDescriptor& d, uint32_t layer, TeamPiece piece) const;

  const TeamModel& model() const { return opt_.model; }
  uint64_t model_hash() const { return model_hash_; }
  RedisClient* client() { return client_.get(); }
  TeamStats stats() const;

 private:
  TeamTier(TeamTierOptions opt, std::unique_ptr<RedisClient> client);
  Status PublishBatch(std::span<const TeamSpan> spans);
  Status CheckDescriptor(const TeamDescriptor& d, uint32_t span, const TeamHash& prev, const TeamHash& chain,
                         std::span<const Token> tokens) const;
  Result<std::vector<uint8_t>> CheckValue(const TeamDescriptor& d, uint32_t layer, TeamPiece piece,
                                          const std::string& key, Result<RedisReply> reply);
  void NoteRequest(std::chrono::steady_clock::time_point start);
  void CountStatus(const Status& s);

  const TeamTierOptions opt_;
  const uint64_t model_hash_;
  const std::string model_key_;  // "m<model hash hex>"
  const uint32_t kv_record_bytes_;
  const uint32_t probe_record_bytes_;
  std::unique_ptr<RedisClient> client_;
  struct Counters {
    std::atomic<uint64_t> lookups{0}, spans_hit{0}, misses{0}, corrupt{0}, errors{0}, reads{0}, bytes_read{0},
        bytes_written{0}, spans_published{0}, spans_present{0}, request_us{0}, max_request_us{0};
  };
  Counters c_;
};

struct TeamPublisherOptions {
  uint64_t max_queue_bytes = 512ull << 20;  // KV copies waiting
  size_t max_jobs = 64;
  std::chrono::milliseconds retry_min = std::chrono::milliseconds(100);
  std::chrono::milliseconds retry_max = std::chrono::seconds(10);
};

struct TeamPublisherStats {
  uint64_t submitted = 0;
  uint64_t refused_full = 0;     // the queue had no room
  uint64_t refused_private = 0;  // private documents never leave the machine
  uint64_t jobs_done = 0;
  uint64_t jobs_failed = 0;  // given up (not a network failure: e.g. wrong password, bad input)
  uint64_t retries = 0;      // tries that failed for the network and were repeated later
  uint64_t queued_jobs = 0;
  uint64_t queued_bytes = 0;
  TeamStats tier;  // the publisher's own connection
};

class TeamPublisher {
 public:
  TeamPublisher(TeamTierOptions tier, TeamPublisherOptions options);
  ~TeamPublisher();  // stops the thread; jobs not yet published are dropped
  TeamPublisher(const TeamPublisher&) = delete;
  TeamPublisher& operator=(const TeamPublisher&) = delete;

  // Copies the KV of tokens [start, tokens.size()) (as TeamTier::EncodeSpans takes it, with its
  // write order when given) and returns at once; false when refused (private, or no room).
  bool Submit(std::span<const Token> tokens, uint64_t start, std::span<const LayerKV> layers, bool private_document,
              TeamOrder order = {});
  // Until the queue is empty and nothing is being written, or the timeout; true when idle.
  bool WaitIdle(std::chrono::milliseconds timeout);
  TeamPublisherStats stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace impress::store

// PassageIndex: retrieval of the best passages for a question over a large document collection,
// with SQLite FTS5 and its built-in bm25() ranking.
//
// Owns its own SQLite file (WAL), separate from ChatDb's: the index is derived data (it can be
// rebuilt from the documents) that may be large and churns on every add/remove (FTS5 segment
// merges), so it should neither bloat nor slow the file of saved conversations, and deleting it
// loses nothing the user wrote. Tables: pidx_meta (schema version), pidx_documents (key, name,
// size), pidx_passages (document, index, byte offset and length) and the FTS5 table pidx_fts
// whose only indexed column is the passage text (rowid = passage id), tokenized by unicode61, so
// bm25() sees exactly one column.
//
// Documents are split into passages at paragraph boundaries (blank lines), paragraphs packed
// together up to a target size and over-long paragraphs cut at a line, sentence or word boundary,
// never inside a UTF-8 sequence. Passages tile the document: their byte ranges, in order,
// concatenate to the exact text.
//
// Questions are free text: BuildFtsQuery() turns one into a safe FTS5 expression (each term
// quoted, terms ORed, stop words dropped), so punctuation, quotes, AND/OR/NEAR, `*` or any UTF-8
// text never cause a syntax error. A question with no searchable terms returns no passages.
//
// Internally synchronized (one mutex): any thread may call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"

namespace impress::sqlite {
class SqliteDb;
}  // namespace impress::sqlite

namespace impress::persist {

struct PassageSpan {
  uint64_t offset = 0;  // bytes into the document
  uint64_t length = 0;  // bytes
};

// Splits `text` into passages of about `target_bytes` (>= 16): paragraphs (separated by blank
// lines; the separator stays with the paragraph before it) are packed while they fit; a paragraph
// longer than the target is cut into pieces of at most `target_bytes`, preferring a line end,
// then a sentence end, then a space in the second half of the piece, never a UTF-8 continuation
// byte. The spans are contiguous and cover the text exactly; empty text gives no spans.
std::vector<PassageSpan> SplitPassages(std::string_view text, size_t target_bytes);

// The query terms of a question: maximal runs of ASCII letters/digits and non-ASCII bytes,
// ASCII-lower-cased, English stop words and duplicates removed, at most `max_terms`, in order.
std::vector<std::string> QueryTerms(std::string_view question, size_t max_terms = 64);
// The FTS5 MATCH expression for a question: "t1" OR "t2" OR ... ("" when no terms).
std::string BuildFtsQuery(std::string_view question);

struct Passage {
  std::string doc_key;
  std::string name;       // the document's display name
  int index = 0;          // passage number within the document
  uint64_t offset = 0;    // byte offset into the document's text
  uint64_t length = 0;    // bytes
  std::string text;       // the passage itself
  double bm25 = 0;        // FTS5's bm25() value: negative, smaller = better match
  int64_t doc_order = 0;  // the document's add sequence number (a re-added document gets a new, larger one)
  double score() const { return -bm25; }  // higher = better
};

struct IndexedDocument {
  std::string doc_key;
  std::string name;
  uint64_t n_bytes = 0;
  int n_passages = 0;
};

struct BudgetSelection {
  std::vector<Passage> passages;  // ordered by (document's add order, offset)
  int n_tokens = 0;               // sum of count_tokens over the chosen passages
  int n_candidates = 0;           // how many ranked passages were considered
};

struct PassageIndexOptions {
  size_t target_passage_bytes = 1200;
  // Refuse writes that would grow the file beyond this many bytes (0 = no limit); they fail
  // like on a full disk and leave the index as it was.
  uint64_t max_file_bytes = 0;
};

class PassageIndex {
 public:
  static constexpr int kSchemaVersion = 1;

  // Opens or creates the index at `path` (":memory:" for a private in-memory index). Returns
  // Unsupported when this SQLite lacks FTS5, kCorruption for a file that is not an SQLite
  // database or has damaged pages, and an error (without writing) for a file that is not a
  // passage index.
  static Result<std::unique_ptr<PassageIndex>> Open(const std::string& path, PassageIndexOptions options = {});
  // Open, except that a file shown damaged (not an SQLite database, or pages quick_check finds
  // broken: kCorruption) is renamed to `path`.unreadable-<time> (kept, with its -wal and -shm),
  // a warning naming both files is logged, and a new, empty index is created at `path`;
  // *moved_to gets the new name ("" when nothing was moved). The index is derived data: the
  // caller adds the documents again (ChatController does, from the saved conversations).
  static Result<std::unique_ptr<PassageIndex>> OpenOrStartOver(const std::string& path,
                                                               PassageIndexOptions options = {},
                                                               std::string* moved_to = nullptr);
  ~PassageIndex();
  PassageIndex(const PassageIndex&) = delete;
  PassageIndex& operator=(const PassageIndex&) = delete;

  // Splits and indexes a document under `doc_key`, replacing any document with that key. One
  // transaction: on failure the index is unchanged.
  Status Add(const std::string& doc_key, const std::string& name, std::string_view text);
  // Removes a document and its passages; NotFound for an unknown key.
  Status Remove(const std::string& doc_key);
  // Whether a document with this key is indexed.
  Result<bool> Contains(const std::string& doc_key);
  // A document's passages in order (bm25 = 0); NotFound for an unknown key.
  Result<std::vector<Passage>> Passages(const std::string& doc_key);
  // The indexed documents in add order.
  Result<std::vector<IndexedDocument>> Documents();

  // The `k` best passages for a free-text question, best first (bm25; ties by passage id).
  Result<std::vector<Passage>> Search(std::string_view question, int k);

  // The best passages whose token counts (by `count_tokens`) fit together in `max_tokens`:
  // considers up to `max_candidates` ranked passages, takes each in rank order when it still
  // fits (skipping ones that do not), and returns them ordered by (document, offset) so the
  // prompt reads naturally.
  Result<BudgetSelection> SelectForBudget(std::string_view question, int max_tokens,
                                          const std::function<int(std::string_view)>& count_tokens,
                                          int max_candidates = 64);

 private:
  PassageIndex(std::unique_ptr<sqlite::SqliteDb> db, PassageIndexOptions options);
  Result<std::vector<Passage>> SearchLocked(std::string_view question, int k) REQUIRES(mu_);
  // Deletes a document's passages (FTS rows included) and its row; SqliteDb::Changes() then
  // counts the document rows deleted. Inside a transaction, mu_ held.
  Status DeleteDocumentLocked(const std::string& doc_key, const std::string& what) REQUIRES(mu_);

  Mutex mu_;
  const std::unique_ptr<sqlite::SqliteDb> db_ PT_GUARDED_BY(mu_);
  const PassageIndexOptions options_;
};

}  // namespace impress::persist

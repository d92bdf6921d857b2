#include "engine/tokenizer/sentencepiece-backend.h"

#include <sentencepiece_processor.h>

namespace impress {

SentencePieceBackend::SentencePieceBackend() : sp_(new sentencepiece::SentencePieceProcessor()) {}
SentencePieceBackend::~SentencePieceBackend() = default;

Status SentencePieceBackend::Open(const std::string& path, TokenizerVocab* vocab) {
  std::shared_ptr<SentencePieceBackend> backend(new SentencePieceBackend());
  const auto st = backend->sp_->Load(path);
  if (!st.ok()) {
    return Status::Corruption(path + ": libsentencepiece cannot load it: " + st.ToString());
  }
  const auto& sp = *backend->sp_;
  const int n = sp.GetPieceSize();
  if (n <= 0) return Status::Corruption(path + ": the SentencePiece model has no pieces");
  *vocab = TokenizerVocab();
  vocab->kind = TokenizerKind::kSentencePiece;
  vocab->pre = PreTokenizerType::kNone;
  vocab->tokens.resize(n);
  vocab->scores.resize(n);
  vocab->types.resize(n);
  for (int i = 0; i < n; ++i) {
    vocab->tokens[i] = sp.IdToPiece(i);
    vocab->scores[i] = sp.GetScore(i);
    TokenType t = TokenType::kNormal;
    if (sp.IsControl(i)) t = TokenType::kControl;
    else if (sp.IsUnknown(i)) t = TokenType::kUnknown;
    else if (sp.IsByte(i)) t = TokenType::kByte;
    else if (sp.IsUnused(i)) t = TokenType::kUnused;
    vocab->types[i] = t;
  }
  auto id_or_none = [n](int id) { return id >= 0 && id < n ? id : -1; };
  vocab->bos = id_or_none(sp.bos_id());
  vocab->eos = id_or_none(sp.eos_id());
  vocab->unk = id_or_none(sp.unk_id());
  vocab->pad = id_or_none(sp.pad_id());
  vocab->add_bos = vocab->bos >= 0;
  // The model proto's add_dummy_prefix is not exposed by this libsentencepiece version's
  // public API: observe it instead (does "x" encode to a piece starting with U+2581?).
  std::vector<std::string> pieces;
  vocab->add_space_prefix = sp.Encode("x", &pieces).ok() && !pieces.empty() && pieces[0].rfind("\xE2\x96\x81", 0) == 0;
  vocab->sp_backend = std::move(backend);
  return Status::Ok();
}

void SentencePieceBackend::Encode(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<int> ids;
  if (!sp_->Encode(absl::string_view(text.data(), text.size()), &ids).ok()) return;
  out->insert(out->end(), ids.begin(), ids.end());
}

}  // namespace impress

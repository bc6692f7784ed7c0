#include "tokenizer/incremental_detokenizer.h"

#include "tokenizer/utf8.h"

namespace mlaserve {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  pending_.append(tokenizer_->token_bytes(id, skip_special_tokens_));
  return release();
}

std::string IncrementalDetokenizer::push(std::span<const int32_t> ids) {
  for (int32_t id : ids) pending_.append(tokenizer_->token_bytes(id, skip_special_tokens_));
  return release();
}

std::string IncrementalDetokenizer::release() {
  const size_t hold = utf8::incomplete_tail(pending_);
  const size_t ready = pending_.size() - hold;
  if (ready == 0) return {};
  std::string text = utf8::decode_lossy(std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return text;
}

std::string IncrementalDetokenizer::finish() {
  std::string text = utf8::decode_lossy(pending_);
  pending_.clear();
  return text;
}

}  // namespace mlaserve

// IncrementalDetokenizer: turns a stream of generated ids into text pieces for streaming. A piece
// never ends inside a UTF-8 character: bytes that start a character still being completed (an
// emoji or CJK character split over byte tokens) are held until it is complete. Concatenating every
// piece and finish() gives exactly Tokenizer::decode of all the ids, because U+FFFD replacement is
// decided per maximal invalid subpart, which a held-back incomplete tail never cuts.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "tokenizer/bpe_tokenizer.h"

namespace mlaserve {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);

  // Adds ids; returns the text that is now final (may be empty).
  std::string push(int32_t id);
  std::string push(std::span<const int32_t> ids);

  // End of the stream: whatever is held back, with an unfinished character as U+FFFD.
  std::string finish();

  // Bytes held back because they may be the start of a character.
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  std::string release();

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // raw bytes not yet returned; at most 3 between calls
};

}  // namespace mlaserve

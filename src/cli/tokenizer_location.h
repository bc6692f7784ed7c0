// Where a command finds its tokenizer: --tokenizer-path, else the model folder, else
// $MLASERVE_TOKENIZER_DIR, else the DeepSeek-V3 tokenizer setup.sh puts beside the binary.
#pragma once

#include <string>

namespace mlaserve::cli {

std::string find_tokenizer(const std::string& tokenizer_path, const std::string& model);

}  // namespace mlaserve::cli

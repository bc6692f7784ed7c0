// One .safetensors file, memory-mapped read-only: the header is parsed and validated once at
// open(), and tensor() hands out zero-copy views whose owner keeps the mapping alive. Also the
// writer, used by tests and fixture tools.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/tensor.h"

namespace mlaserve {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t offset;  // absolute byte offset in the file
  uint64_t nbytes;
};

class SafetensorsFile : public std::enable_shared_from_this<SafetensorsFile> {
 public:
  // Throws Error naming the file (and the tensor, where there is one) on any malformed input.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  // A read-only view into the mapping (writing through it faults); it keeps this file mapped.
  Tensor tensor(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_size() const { return size_; }

 private:
  explicit SafetensorsFile(std::string path) : path_(std::move(path)) {}
  void parse_header();

  std::string path_;
  void* base_ = nullptr;  // the whole file, PROT_READ
  uint64_t size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` in the given order, packed with no gaps (as the reference reader requires),
// after a header padded with spaces to a multiple of 8 bytes so the data section is 8-aligned.
// Host tensors only; non-contiguous ones are copied first. Writes path + ".tmp", then renames,
// so a reader never sees a half-written file.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mlaserve

// A checkpoint folder seen as one flat set of named tensors, whatever the number of shard files.
// With model.safetensors.index.json the index says which shard holds each tensor and is checked
// against the shards; without it the folder's safetensors files are used (see open()).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weights/safetensors.h"

namespace mlaserve {

class Checkpoint {
 public:
  // Without an index: model.safetensors alone when present (as HF loads an unsharded
  // checkpoint; a fixture folder also holds reference.safetensors), else every *.safetensors,
  // sorted. Throws Error naming the folder, index, shard and tensor at fault.
  static Checkpoint open(const std::string& dir);

  bool has(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  std::string file_of(const std::string& name) const;  // full path of the file holding it
  Tensor tensor(const std::string& name) const;         // read-only view into the mapping
  std::vector<std::string> names() const;               // sorted
  size_t num_files() const { return files_.size(); }
  uint64_t total_bytes() const;  // sum of the tensors' data bytes
  const std::string& dir() const { return dir_; }

 private:
  const SafetensorsFile& file_holding(const std::string& name) const;

  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

}  // namespace mlaserve

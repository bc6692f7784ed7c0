#include "weights/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace mlaserve {

namespace {

using nlohmann::json;

// The reference implementation refuses headers past 100 MB; a real one is well under 1 MB even
// for DeepSeek-V3's biggest shards, so anything larger is a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Product of the dims, or nullopt on overflow; `shape` is already known to be non-negative.
std::optional<uint64_t> checked_numel(const Shape& shape) {
  uint64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, uint64_t(d), &n)) return std::nullopt;
  return n;
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open safetensors file '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("safetensors file '{}' is not a regular file", path);
  }
  uint64_t size = uint64_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail("safetensors file '{}' is {} bytes, shorter than the 8-byte header length", path, size);
  }
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (base == MAP_FAILED) fail("cannot mmap safetensors file '{}': {}", path, std::strerror(map_errno));

  // From here the destructor unmaps, also when parse_header throws.
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile(path));
  file->base_ = base;
  file->size_ = size;
  file->parse_header();
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (base_) ::munmap(base_, size_);
}

void SafetensorsFile::parse_header() {
  const auto* bytes = static_cast<const unsigned char*>(base_);
  uint64_t header_len = read_le64(bytes);
  MLA_CHECK(header_len <= kMaxHeaderBytes, "safetensors file '{}': header length {} is absurd (limit {})", path_,
            header_len, kMaxHeaderBytes);
  MLA_CHECK(header_len <= size_ - 8, "safetensors file '{}': header length {} runs past the end of the {}-byte file",
            path_, header_len, size_);
  const char* text = reinterpret_cast<const char*>(bytes + 8);

  // nlohmann keeps the last of duplicate keys silently; a repeated tensor name is a corrupt
  // header, so count the top-level keys while parsing.
  std::vector<std::string> keys;
  json header;
  try {
    header = json::parse(text, text + header_len, [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key) keys.push_back(parsed.get<std::string>());
      return true;
    });
  } catch (const json::exception& e) {
    fail("safetensors file '{}': header is not valid JSON: {}", path_, e.what());
  }
  MLA_CHECK(header.is_object(), "safetensors file '{}': header is a JSON {}, not an object", path_,
            header.type_name());
  std::sort(keys.begin(), keys.end());
  auto dup = std::adjacent_find(keys.begin(), keys.end());
  MLA_CHECK(dup == keys.end(), "safetensors file '{}': header lists '{}' twice", path_,
            dup == keys.end() ? "" : *dup);

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size_ - data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      MLA_CHECK(entry.is_object(), "safetensors file '{}': __metadata__ is not an object", path_);
      for (const auto& [key, value] : entry.items()) {
        MLA_CHECK(value.is_string(), "safetensors file '{}': __metadata__ value '{}' is not a string", path_, key);
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { fail("tensor '{}' in file '{}': {}", name, path_, what); };
    if (!entry.is_object()) bad("entry is not an object");

    auto dt = entry.find("dtype");
    if (dt == entry.end() || !dt->is_string()) bad("missing or non-string dtype");
    std::optional<DType> dtype = dtype_from_name(dt->get<std::string>());
    if (!dtype) bad(fmt::format("unknown dtype '{}'", dt->get<std::string>()));

    auto sh = entry.find("shape");
    if (sh == entry.end() || !sh->is_array()) bad("shape missing or not a list");
    Shape shape;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
        bad(fmt::format("shape {} is not a list of non-negative integers", sh->dump()));
      shape.push_back(int64_t(d.get<uint64_t>()));
    }

    auto off = entry.find("data_offsets");
    if (off == entry.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      bad("data_offsets missing or not two non-negative integers");
    uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end) bad(fmt::format("data_offsets [{}, {}] begin after end", begin, end));
    if (end > data_size)
      bad(fmt::format("data_offsets [{}, {}] run past the end of the {}-byte data section", begin, end, data_size));

    std::optional<uint64_t> numel = checked_numel(shape);
    uint64_t need = 0;
    if (!numel || __builtin_mul_overflow(*numel, uint64_t(dtype_size(*dtype)), &need))
      bad(fmt::format("shape {} overflows", shape_str(shape)));
    if (end - begin != need)
      bad(fmt::format("{} bytes for {}{} needs {}", end - begin, dtype_name(*dtype), shape_str(shape), need));

    tensors_[name] = TensorInfo{name, *dtype, std::move(shape), data_start + begin, end - begin};
  }

  // Overlap check: sorted by start, each non-empty tensor must begin at or after the furthest
  // end seen so far. Gaps are allowed (some writers align tensors).
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [name, t] : tensors_)
    if (t.nbytes > 0) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  const TensorInfo* furthest = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (furthest && t->offset < furthest->offset + furthest->nbytes)
      fail("tensor '{}' in file '{}' overlaps tensor '{}' (bytes [{}, {}) and [{}, {}))", t->name, path_,
           furthest->name, t->offset, t->offset + t->nbytes, furthest->offset, furthest->offset + furthest->nbytes);
    if (!furthest || t->offset + t->nbytes > furthest->offset + furthest->nbytes) furthest = t;
  }
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("no tensor '{}' in file '{}'", name, path_);
  return it->second;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& t = info(name);
  // PROT_READ mapping: the const_cast only satisfies Tensor's untyped pointer.
  void* data = const_cast<char*>(static_cast<const char*>(base_)) + t.offset;
  return Tensor::wrap(data, t.dtype, t.shape, std::const_pointer_cast<SafetensorsFile>(shared_from_this()));
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the caller's order, so the header reads in the same order as the data.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    MLA_CHECK(!name.empty() && name != "__metadata__", "write_safetensors '{}': bad tensor name '{}'", path, name);
    MLA_CHECK(!header.contains(name), "write_safetensors '{}': tensor '{}' given twice", path, name);
    MLA_CHECK(t.defined(), "write_safetensors '{}': tensor '{}' is undefined", path, name);
    MLA_CHECK(t.device() == Device::CPU, "write_safetensors '{}': tensor '{}' is not on the host", path, name);
    data.push_back(t.contiguous());
    uint64_t n = data.back().nbytes();
    header[name] = {{"dtype", std::string(dtype_name(t.dtype()))}, {"shape", t.shape()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("cannot create '{}': {}", tmp, std::strerror(errno));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const Tensor& t : data)
    ok = ok && std::fwrite(t.raw(), 1, t.nbytes(), f) == t.nbytes();
  ok = (std::fclose(f) == 0) && ok;
  std::error_code ec;
  if (ok) std::filesystem::rename(tmp, path, ec);
  if (!ok || ec) {
    std::string why = ok ? "rename failed: " + ec.message() : "write failed";
    std::filesystem::remove(tmp, ec);
    fail("cannot write safetensors file '{}': {}", path, why);
  }
}

}  // namespace mlaserve

// Safetensors reader/writer and Checkpoint: round trips, sharded folders, and malformed files,
// which must all end in an mlaserve::Error naming the file and tensor, never a crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/error.h"
#include "weights/checkpoint.h"
#include "weights/safetensors.h"

namespace mlaserve {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / fmt::format("mlaserve_test_{}_{}", getpid(), name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// A safetensors file from a hand-written header and `data_bytes` bytes of data.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(char(n >> (8 * i)));
  out << header << std::string(data_bytes, '\x11');
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Runs `fn`, which must throw Error whose message holds every one of `needles`.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& s : needles) EXPECT_NE(msg.find(s), std::string::npos) << "'" << s << "' not in: " << msg;
  }
}

void expect_open_error(const std::string& path, std::vector<std::string> needles) {
  needles.push_back(path);
  expect_error([&] { SafetensorsFile::open(path); }, needles);
}

Tensor filled(DType dtype, Shape shape, int seed) {
  Tensor t = Tensor::empty(dtype, shape);
  auto* p = t.data<uint8_t>();
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(i * 31 + seed * 7 + 3);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.dtype() == cb.dtype() && ca.shape() == cb.shape() && std::memcmp(ca.raw(), cb.raw(), ca.nbytes()) == 0;
}

TEST(Safetensors, RoundTripsEveryDtypeFromNonContiguousViews) {
  TempDir dir("roundtrip");
  std::vector<std::pair<std::string, Tensor>> in;
  int seed = 0;
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3, DType::I32, DType::I64, DType::U8}) {
    Tensor full = filled(t, {3, 5}, ++seed);
    Tensor view = full.narrow(1, 1, 3);  // [3, 3] with row stride 5
    ASSERT_FALSE(view.is_contiguous());
    in.emplace_back(fmt::format("w.{}", dtype_name(t)), view);
  }
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -448.0f, 0.015625f, std::ldexp(1.0f, -9)};
  Tensor fp8 = Tensor::empty(DType::F8_E4M3, {6});
  for (size_t i = 0; i < values.size(); ++i) store_from_f32(fp8.raw(), DType::F8_E4M3, i, values[i]);
  in.emplace_back("fp8.values", fp8);
  in.emplace_back("empty", Tensor::empty(DType::BF16, {0, 4}));
  in.emplace_back("scalar", Tensor::from_f32({2.5f}, {}));

  const std::string path = dir.file("m.safetensors");
  write_safetensors(path, in, {{"format", "pt"}});
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->tensors().size(), in.size());
  for (const auto& [name, t] : in) {
    ASSERT_TRUE(f->has(name)) << name;
    const TensorInfo& info = f->info(name);
    EXPECT_EQ(info.name, name);
    EXPECT_EQ(info.dtype, t.dtype());
    EXPECT_EQ(info.shape, t.shape());
    EXPECT_EQ(info.nbytes, t.nbytes());
    EXPECT_TRUE(same_bytes(f->tensor(name), t)) << name;
  }
  EXPECT_EQ(f->info("w.F32").offset % 8, 0u);  // header padded so data starts 8-aligned
  Tensor back = f->tensor("fp8.values");
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(load_as_f32(back.raw(), DType::F8_E4M3, i), values[i]);
    EXPECT_EQ(std::signbit(load_as_f32(back.raw(), DType::F8_E4M3, i)), std::signbit(values[i]));
  }
  EXPECT_FALSE(f->has("nope"));
  expect_error([&] { f->info("nope"); }, {"nope", path});
}

TEST(Safetensors, ViewKeepsMappingAlive) {
  TempDir dir("keepalive");
  const std::string path = dir.file("m.safetensors");
  Tensor src = filled(DType::F32, {64}, 5);
  write_safetensors(path, {{"x", src}});
  Tensor view = SafetensorsFile::open(path)->tensor("x");  // the file object is gone after this line
  EXPECT_TRUE(same_bytes(view, src));
}

TEST(Safetensors, RejectsDuplicateNamesOnWrite) {
  TempDir dir("dupwrite");
  Tensor t = filled(DType::U8, {4}, 1);
  expect_error([&] { write_safetensors(dir.file("m.safetensors"), {{"a", t}, {"a", t}}); }, {"'a'"});
}

TEST(Safetensors, TruncatedFile) {
  TempDir dir("truncated");
  const std::string path = dir.file("cut.safetensors");
  write_safetensors(path, {{"first", filled(DType::F32, {16}, 1)}, {"second", filled(DType::F32, {16}, 2)}});
  fs::resize_file(path, fs::file_size(path) - 32);  // into the middle of "second"
  expect_open_error(path, {"second", "past the end"});
}

TEST(Safetensors, ShorterThanLengthField) {
  TempDir dir("tiny");
  const std::string path = dir.file("tiny.safetensors");
  write_text(path, "abc");
  expect_open_error(path, {"shorter"});
  write_text(path, "");
  expect_open_error(path, {"shorter"});
}

TEST(Safetensors, HeaderLengthPastEndOrAbsurd) {
  TempDir dir("hlen");
  const std::string path = dir.file("h.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    uint64_t n = 1000;
    out.write(reinterpret_cast<const char*>(&n), 8);  // little-endian host
    out << "{}";
  }
  expect_open_error(path, {"header length 1000"});
  {
    std::ofstream out(path, std::ios::binary);
    uint64_t n = ~uint64_t(0);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << "{}";
  }
  expect_open_error(path, {"absurd"});
}

TEST(Safetensors, HeaderNotJsonObject) {
  TempDir dir("garbage");
  const std::string path = dir.file("g.safetensors");
  write_raw(path, "{\"a\": {\"dtype\": \"F32\", ", 0);
  expect_open_error(path, {"not valid JSON"});
  write_raw(path, "\x01\x02garbage\xff", 0);
  expect_open_error(path, {"not valid JSON"});
  write_raw(path, "[1, 2]", 0);
  expect_open_error(path, {"not an object"});
}

TEST(Safetensors, OffsetsPastEnd) {
  TempDir dir("offsets");
  const std::string path = dir.file("o.safetensors");
  write_raw(path, R"({"big": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}})", 16);
  expect_open_error(path, {"'big'", "past the end"});
}

TEST(Safetensors, BadOffsetsShape) {
  TempDir dir("badoffsets");
  const std::string path = dir.file("o.safetensors");
  write_raw(path, R"({"t": {"dtype": "U8", "shape": [4], "data_offsets": [8, 4]}})", 16);
  expect_open_error(path, {"'t'", "begin after end"});
  write_raw(path, R"({"t": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4, 8]}})", 16);
  expect_open_error(path, {"'t'", "data_offsets"});
  write_raw(path, R"({"t": {"dtype": "U8", "shape": [4]}})", 16);
  expect_open_error(path, {"'t'", "data_offsets"});
  write_raw(path, R"({"t": {"dtype": "U8", "shape": [4], "data_offsets": [-1, 3]}})", 16);
  expect_open_error(path, {"'t'", "data_offsets"});
}

TEST(Safetensors, SizeMismatch) {
  TempDir dir("mismatch");
  const std::string path = dir.file("x.safetensors");
  write_raw(path, R"({"x": {"dtype": "BF16", "shape": [2, 4], "data_offsets": [0, 12]}})", 16);
  expect_open_error(path, {"tensor 'x'", "12 bytes for BF16[2, 4] needs 16"});
}

TEST(Safetensors, UnknownDtypeAndBadShape) {
  TempDir dir("dtype");
  const std::string path = dir.file("d.safetensors");
  write_raw(path, R"({"q": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 2]}})", 8);
  expect_open_error(path, {"'q'", "unknown dtype 'Q7'"});
  write_raw(path, R"({"q": {"dtype": "U8", "shape": [-2], "data_offsets": [0, 2]}})", 8);
  expect_open_error(path, {"'q'", "non-negative"});
  write_raw(path, R"({"q": {"dtype": "U8", "shape": "2", "data_offsets": [0, 2]}})", 8);
  expect_open_error(path, {"'q'", "shape"});
  write_raw(path, R"({"q": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 2]}})", 8);
  expect_open_error(path, {"'q'", "shape"});
  write_raw(path, R"({"q": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 2]}})", 8);
  expect_open_error(path, {"'q'", "overflows"});
  write_raw(path, R"({"q": [1, 2]})", 8);
  expect_open_error(path, {"'q'"});
}

TEST(Safetensors, OverlappingRanges) {
  TempDir dir("overlap");
  const std::string path = dir.file("ov.safetensors");
  write_raw(path,
            R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
            R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
            24);
  expect_open_error(path, {"'a'", "'b'", "overlaps"});
  // A tensor nested inside a longer one, after a third that ends earlier.
  write_raw(path,
            R"({"long": {"dtype": "U8", "shape": [20], "data_offsets": [0, 20]},)"
            R"( "mid": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]},)"
            R"( "late": {"dtype": "U8", "shape": [2], "data_offsets": [10, 12]}})",
            24);
  expect_open_error(path, {"overlaps", "'long'"});
}

TEST(Safetensors, DuplicateHeaderKey) {
  TempDir dir("dupkey");
  const std::string path = dir.file("dk.safetensors");
  write_raw(path,
            R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
            R"( "a": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
            8);
  expect_open_error(path, {"'a'", "twice"});
}

TEST(Safetensors, MissingFile) {
  expect_open_error("/nonexistent/mlaserve/x.safetensors", {"cannot open"});
}

// Two shards and an index, as HF writes them.
void write_sharded(const TempDir& dir) {
  write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                    {{"embed", filled(DType::BF16, {8, 4}, 1)}, {"norm", filled(DType::F32, {4}, 2)}});
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"head", filled(DType::F8_E4M3, {4, 8}, 3)}});
  write_text(dir.file("model.safetensors.index.json"), R"({"metadata": {"total_size": 112}, "weight_map": {
    "embed": "model-00001-of-00002.safetensors", "norm": "model-00001-of-00002.safetensors",
    "head": "model-00002-of-00002.safetensors"}})");
}

TEST(Checkpoint, ShardedThroughIndex) {
  TempDir dir("sharded");
  write_sharded(dir);
  write_safetensors(dir.file("unrelated.safetensors"), {{"stray", filled(DType::U8, {4}, 9)}});  // not in index
  Checkpoint ckpt = Checkpoint::open(dir.path.string());
  EXPECT_EQ(ckpt.num_files(), 2u);
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"embed", "head", "norm"}));
  EXPECT_FALSE(ckpt.has("stray"));
  EXPECT_TRUE(ckpt.has("head"));
  EXPECT_EQ(ckpt.file_of("head"), dir.file("model-00002-of-00002.safetensors"));
  EXPECT_EQ(ckpt.file_of("norm"), dir.file("model-00001-of-00002.safetensors"));
  EXPECT_EQ(ckpt.info("embed").shape, (Shape{8, 4}));
  EXPECT_EQ(ckpt.total_bytes(), 64u + 16u + 32u);
  EXPECT_TRUE(same_bytes(ckpt.tensor("head"), filled(DType::F8_E4M3, {4, 8}, 3)));
  expect_error([&] { ckpt.tensor("nope"); }, {"'nope'", dir.path.string()});
}

TEST(Checkpoint, FolderWithoutIndex) {
  TempDir dir("noindex");
  write_safetensors(dir.file("b.safetensors"), {{"y", filled(DType::F32, {2}, 1)}});
  write_safetensors(dir.file("a.safetensors"), {{"x", filled(DType::F32, {2}, 2)}});
  Checkpoint ckpt = Checkpoint::open(dir.path.string());
  EXPECT_EQ(ckpt.num_files(), 2u);
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(ckpt.file_of("x"), dir.file("a.safetensors"));
}

TEST(Checkpoint, FixtureFolderUsesModelFileOnly) {
  // The fixture folder also holds reference.safetensors (expected logits), which is no weight.
  Checkpoint ckpt = Checkpoint::open(MLASERVE_SOURCE_DIR "/tests/fixtures/models/v2_greedy");
  EXPECT_EQ(ckpt.num_files(), 1u);
  EXPECT_TRUE(ckpt.has("lm_head.weight"));
  EXPECT_FALSE(ckpt.has("logits_0"));
}

TEST(Checkpoint, MissingShard) {
  TempDir dir("missingshard");
  write_sharded(dir);
  fs::remove(dir.file("model-00002-of-00002.safetensors"));
  expect_error([&] { Checkpoint::open(dir.path.string()); },
               {"model-00002-of-00002.safetensors", "'head'", "model.safetensors.index.json"});
}

TEST(Checkpoint, IndexedTensorAbsentFromShard) {
  TempDir dir("absent");
  write_sharded(dir);
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"other", filled(DType::U8, {4}, 3)}});
  expect_error([&] { Checkpoint::open(dir.path.string()); },
               {"'head'", "model-00002-of-00002.safetensors", "model.safetensors.index.json"});
}

TEST(Checkpoint, BadIndex) {
  TempDir dir("badindex");
  write_sharded(dir);
  write_text(dir.file("model.safetensors.index.json"), "{not json");
  expect_error([&] { Checkpoint::open(dir.path.string()); }, {"model.safetensors.index.json", "JSON"});
  write_text(dir.file("model.safetensors.index.json"), R"({"metadata": {}})");
  expect_error([&] { Checkpoint::open(dir.path.string()); }, {"model.safetensors.index.json", "weight_map"});
}

TEST(Checkpoint, DuplicateTensorAcrossShards) {
  TempDir dir("dupshard");
  write_safetensors(dir.file("a.safetensors"), {{"w", filled(DType::F32, {2}, 1)}});
  write_safetensors(dir.file("b.safetensors"), {{"w", filled(DType::F32, {2}, 2)}});
  expect_error([&] { Checkpoint::open(dir.path.string()); }, {"'w'", "a.safetensors", "b.safetensors"});
}

TEST(Checkpoint, DuplicateTensorAcrossIndexedShards) {
  TempDir dir("dupindexed");
  write_sharded(dir);
  write_safetensors(dir.file("model-00002-of-00002.safetensors"),
                    {{"head", filled(DType::F8_E4M3, {4, 8}, 3)}, {"norm", filled(DType::F32, {4}, 2)}});
  expect_error([&] { Checkpoint::open(dir.path.string()); },
               {"'norm'", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"});
}

TEST(Checkpoint, BadShardNamesFolderAndTensor) {
  TempDir dir("badshard");
  write_sharded(dir);
  fs::resize_file(dir.file("model-00002-of-00002.safetensors"),
                  fs::file_size(dir.file("model-00002-of-00002.safetensors")) - 4);
  expect_error([&] { Checkpoint::open(dir.path.string()); }, {"'head'", "model-00002-of-00002.safetensors"});
}

TEST(Checkpoint, EmptyOrMissingFolder) {
  TempDir dir("empty");
  write_text(dir.file("config.json"), "{}");
  expect_error([&] { Checkpoint::open(dir.path.string()); }, {"no .safetensors", dir.path.string()});
  expect_error([&] { Checkpoint::open(dir.file("absent")); }, {dir.file("absent")});
}

}  // namespace
}  // namespace mlaserve

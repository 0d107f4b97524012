// Tokenizer construction: files -> TokenizerSpec -> validated lookup tables.
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/strings.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/tokenizer.h"

namespace flashserve::tokenizer {
namespace {

// Ids index dense tables; this bounds what a malformed file can make us allocate.
constexpr int64_t kMaxVocabSize = int64_t{1} << 24;

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(
        path.string(), ": no such file (expected tokenizer.json or a directory holding it)"));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::InternalError(absl::StrCat(path.string(), ": read failed"));
  }
  return contents.str();
}

absl::Status Error(std::string_view source, std::string_view key, std::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat(ToAbsl(source), ": ", ToAbsl(key), ": ", ToAbsl(message)));
}

std::string Quoted(std::string_view s) { return absl::StrCat("\"", ToAbsl(s), "\""); }

}  // namespace

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  std::filesystem::path json_path(path);
  std::error_code ec;
  if (std::filesystem::is_directory(json_path, ec)) json_path /= "tokenizer.json";
  ASSIGN_OR_RETURN(std::string tokenizer_json, ReadFile(json_path));
  const std::filesystem::path config_path = json_path.parent_path() / "tokenizer_config.json";
  std::string config_json;
  if (std::filesystem::exists(config_path, ec)) {
    ASSIGN_OR_RETURN(config_json, ReadFile(config_path));
    if (config_json.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(config_path.string(), ": empty file"));
    }
  }
  auto spec = ParseTokenizerJson(tokenizer_json, json_path.string());
  if (!spec.ok()) return spec.status();
  if (!config_json.empty()) {
    RETURN_IF_ERROR(ParseTokenizerConfig(config_json, config_path.string(), &*spec));
  }
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  RETURN_IF_ERROR(tokenizer->Build(*std::move(spec), json_path.string()));
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                               std::string_view config_json,
                                                               std::string_view source) {
  ASSIGN_OR_RETURN(TokenizerSpec spec, ParseTokenizerJson(tokenizer_json, source));
  if (!config_json.empty()) {
    RETURN_IF_ERROR(ParseTokenizerConfig(config_json, "tokenizer_config.json", &spec));
  }
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  RETURN_IF_ERROR(tokenizer->Build(std::move(spec), source));
  return tokenizer;
}

absl::Status Tokenizer::Build(TokenizerSpec spec, std::string_view source) {
  int64_t max_id = -1;
  for (const auto& [token, id] : spec.vocab) max_id = std::max<int64_t>(max_id, id);
  for (const AddedTokenSpec& t : spec.added_tokens) max_id = std::max<int64_t>(max_id, t.id);
  if (max_id < 0) return Error(source, "model.vocab", "no tokens");
  if (max_id >= kMaxVocabSize) {
    return Error(source, "model.vocab",
                 absl::StrCat("id ", max_id, " exceeds the limit ", kMaxVocabSize - 1));
  }
  const auto size = static_cast<size_t>(max_id + 1);
  id_to_token_.assign(size, std::string());
  flags_.assign(size, 0);

  // The BPE vocabulary.
  absl::flat_hash_map<std::string, TokenId> vocab;
  vocab.reserve(spec.vocab.size());
  for (auto& [token, id] : spec.vocab) {
    if (flags_[id] & kPresent) {
      return Error(source, "model.vocab",
                   absl::StrCat("id ", id, " is used by both ", Quoted(id_to_token_[id]), " and ",
                                Quoted(token)));
    }
    flags_[id] = kPresent;
    id_to_token_[id] = token;
    vocab.emplace(std::move(token), id);
  }

  // Added tokens: an id already in the vocabulary must hold the same string.
  token_to_id_ = vocab;
  std::vector<AddedTokenMatcher::Entry> first_pass, second_pass;
  for (size_t i = 0; i < spec.added_tokens.size(); ++i) {
    const AddedTokenSpec& t = spec.added_tokens[i];
    const std::string key = absl::StrCat("added_tokens[", i, "]");
    if (flags_[t.id] & kAdded) {
      return Error(source, key, absl::StrCat("id ", t.id, " is listed twice"));
    }
    if ((flags_[t.id] & kPresent) && id_to_token_[t.id] != t.content) {
      return Error(source, key,
                   absl::StrCat("id ", t.id, " is the vocabulary entry ",
                                Quoted(id_to_token_[t.id]), ", not ", Quoted(t.content)));
    }
    auto [it, inserted] = token_to_id_.emplace(t.content, t.id);
    if (!inserted && it->second != t.id) {
      return Error(
          source, key,
          absl::StrCat(Quoted(t.content), " has id ", t.id, " but is already id ", it->second));
    }
    flags_[t.id] = kPresent | kAdded | (t.special ? kSpecial : 0);
    id_to_token_[t.id] = t.content;
    (t.normalized ? second_pass : first_pass).push_back({t.content, t.id, t.special});
  }
  non_normalized_added_ = AddedTokenMatcher(first_pass);
  normalized_added_ = AddedTokenMatcher(second_pass);

  // Every byte needs its single-character token: BPE starts from them.
  std::array<TokenId, 256> byte_ids{};
  for (int b = 0; b < 256; ++b) {
    const std::string token = ByteToToken(static_cast<uint8_t>(b));
    auto it = vocab.find(token);
    if (it == vocab.end()) {
      return Error(
          source, "model.vocab",
          absl::StrCat("no entry for the byte-level character ", Quoted(token), " (byte ", b, ")"));
    }
    byte_ids[b] = it->second;
  }

  std::vector<BpeMergeRule> merges;
  merges.reserve(spec.merges.size());
  for (size_t i = 0; i < spec.merges.size(); ++i) {
    const auto& [left, right] = spec.merges[i];
    const std::string key = absl::StrCat("model.merges[", i, "]");
    auto l = vocab.find(left);
    auto r = vocab.find(right);
    auto m = vocab.find(left + right);
    if (l == vocab.end()) return Error(source, key, Quoted(left) + " is not in model.vocab");
    if (r == vocab.end()) return Error(source, key, Quoted(right) + " is not in model.vocab");
    if (m == vocab.end()) {
      return Error(source, key, "merged token " + Quoted(left + right) + " is not in model.vocab");
    }
    merges.push_back({l->second, r->second, m->second});
  }

  // Decoded bytes per id (the ByteLevel decoder: a token whose characters are all in the byte
  // alphabet stands for those bytes, any other token for its own UTF-8).
  absl::flat_hash_map<std::string, TokenId> piece_vocab;
  id_bytes_offset_.assign(size + 1, 0);
  for (size_t id = 0; id < size; ++id) {
    id_bytes_offset_[id] = static_cast<uint32_t>(id_bytes_.size());
    if (!(flags_[id] & kPresent)) continue;
    const std::optional<std::string> bytes = ByteLevelToBytes(id_to_token_[id]);
    id_bytes_ += bytes.has_value() ? *bytes : id_to_token_[id];
  }
  id_bytes_offset_[size] = static_cast<uint32_t>(id_bytes_.size());
  if (spec.ignore_merges) {  // whole pieces found in model.vocab skip the merges
    for (const auto& [token, id] : vocab) {
      if (auto bytes = ByteLevelToBytes(token)) piece_vocab.emplace(*std::move(bytes), id);
    }
  }
  bpe_ = std::make_unique<BpeModel>(byte_ids, merges, spec.ignore_merges, std::move(piece_vocab));

  auto pre = PreTokenizer::Create(spec.split_patterns);
  if (!pre.ok()) return Error(source, "pre_tokenizer", ToStd(pre.status().message()));
  pre_tokenizer_ = *std::move(pre);
  trims_offsets_ = spec.trims_offsets;

  struct Named {
    const std::string& name;
    const char* key;
    std::optional<TokenId>* id;
  };
  for (const Named& n : {Named{spec.bos_token, "bos_token", &special_ids_.bos},
                         Named{spec.eos_token, "eos_token", &special_ids_.eos},
                         Named{spec.pad_token, "pad_token", &special_ids_.pad}}) {
    if (n.name.empty()) continue;
    *n.id = TokenToId(n.name);
    if (!n.id->has_value()) {
      return Error("tokenizer_config.json", n.key,
                   absl::StrCat(Quoted(n.name), " is not a token of ", ToAbsl(source)));
    }
  }
  return absl::OkStatus();
}

}  // namespace flashserve::tokenizer

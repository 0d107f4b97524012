// LoadModelConfig: file or checkpoint directory -> format detection -> parser.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "model/config/config_parser.h"
#include "model/config/model_args_fields.h"

namespace flashserve::model {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::filesystem::path& path) {
  std::error_code ec;
  const bool is_regular = std::filesystem::is_regular_file(path, ec);
  if (ec || !is_regular) {
    return absl::NotFoundError(absl::StrCat("no config file at ", path.string()));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::FailedPreconditionError(absl::StrCat("cannot open ", path.string()));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::FailedPreconditionError(absl::StrCat("cannot read ", path.string()));
  return std::move(contents).str();
}

}  // namespace

absl::StatusOr<ConfigFormat> DetectConfigFormat(std::string_view json) {
  ASSIGN_OR_RETURN(nlohmann::json object, config_internal::ParseJsonObject(json, "config"));
  if (object.contains("text_config") || object.contains("architectures") ||
      object.contains("model_type")) {
    return ConfigFormat::kHf;
  }
  return ConfigFormat::kFlat;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::filesystem::path file(path);
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "config.json";
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(file));
  const std::string context = absl::StrCat("while loading ", file.string());
  ASSIGN_OR_RETURN(ConfigFormat format, DetectConfigFormat(text), context);
  if (format == ConfigFormat::kHf) {
    ASSIGN_OR_RETURN(ModelConfig config, ParseHfConfig(text), context);
    return config;
  }
  ASSIGN_OR_RETURN(ModelConfig config, ParseFlatConfig(text), context);
  return config;
}

}  // namespace flashserve::model

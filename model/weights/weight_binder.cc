#include "model/weights/weight_binder.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/check.h"

namespace flashserve::model {
namespace {

using safetensors::DType;

std::string Describe(DType dtype, const std::vector<int64_t>& shape) {
  return absl::StrCat(std::string(safetensors::DTypeName(dtype)), " ",
                      safetensors::ShapeString(shape));
}

// Appends up to kMaxListed items of `items` under a heading.
void AppendList(std::string* out, const char* heading, const std::vector<std::string>& items) {
  constexpr size_t kMaxListed = 20;
  if (items.empty()) return;
  absl::StrAppend(out, "\n  ", heading, " (", items.size(), "):");
  for (size_t i = 0; i < items.size() && i < kMaxListed; ++i)
    absl::StrAppend(out, "\n    ", items[i]);
  if (items.size() > kMaxListed)
    absl::StrAppend(out, "\n    ... and ", items.size() - kMaxListed, " more");
}

}  // namespace

TensorView WeightBinder::Tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                ParamKind kind, TensorRole role) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  TensorSpec spec{.name = name,
                  .dtype = dtype,
                  .shape = shape,
                  .kind = kind_override_.value_or(kind),
                  .role = role};
  spec.bytes = numel * static_cast<int64_t>(safetensors::DTypeSize(dtype));
  // Packed FP4 weights are I8 bytes holding two parameters each.
  spec.params = role == TensorRole::kScales ? 0 : (dtype == DType::kI8 ? 2 * numel : numel);
  specs_.push_back(spec);

  TensorView view;
  if (checkpoint_ == nullptr) return view;
  absl::StatusOr<TensorView> found = checkpoint_->Get(name);
  if (!found.ok()) {
    missing_.push_back(absl::StrCat(name, " (expected ", Describe(dtype, shape), ")"));
    return view;
  }
  if (found->dtype != dtype || found->shape != shape) {
    mismatched_.push_back(absl::StrCat(name, ": expected ", Describe(dtype, shape), ", found ",
                                       Describe(found->dtype, found->shape)));
    return view;
  }
  return *found;
}

Linear WeightBinder::LinearLayer(const std::string& prefix, LinearFormat format,
                                 int64_t out_features, int64_t in_features, ParamKind kind,
                                 bool bias) {
  Linear linear{.format = format, .out_features = out_features, .in_features = in_features};
  const std::string w = prefix + ".weight";
  const std::string s = prefix + ".scale";
  switch (format) {
    case LinearFormat::kBf16:
      linear.weight = Tensor(w, DType::kBF16, {out_features, in_features}, kind);
      break;
    case LinearFormat::kFp8Block32:
      linear.weight = Tensor(w, DType::kF8E4M3, {out_features, in_features}, kind);
      linear.scale = Tensor(s, DType::kF8E8M0, {(out_features + 31) / 32, (in_features + 31) / 32},
                            kind, TensorRole::kScales);
      break;
    case LinearFormat::kFp4Block32:
      CHECK_EQ(in_features % 32, 0) << prefix;
      linear.weight = Tensor(w, DType::kI8, {out_features, in_features / 2}, kind);
      linear.scale =
          Tensor(s, DType::kF8E8M0, {out_features, in_features / 32}, kind, TensorRole::kScales);
      break;
  }
  if (bias) linear.bias = Tensor(prefix + ".bias", DType::kBF16, {out_features}, kind);
  return linear;
}

absl::Status WeightBinder::Finish(const std::vector<std::string>& allowed_extra) {
  if (checkpoint_ == nullptr) return absl::OkStatus();
  std::set<std::string> expected;
  for (const TensorSpec& spec : specs_) expected.insert(spec.name);
  for (const std::string& name : allowed_extra) expected.insert(name);
  std::vector<std::string> unexpected;
  for (const std::string& name : checkpoint_->TensorNames()) {
    if (!expected.count(name)) unexpected.push_back(name);
  }
  if (missing_.empty() && mismatched_.empty() && unexpected.empty()) return absl::OkStatus();
  std::string message = absl::StrCat("checkpoint ", checkpoint_->path(),
                                     " does not match its config: ", missing_.size(), " missing, ",
                                     mismatched_.size(), " with the wrong dtype or shape, ",
                                     unexpected.size(), " unexpected");
  AppendList(&message, "missing", missing_);
  AppendList(&message, "wrong dtype or shape", mismatched_);
  AppendList(&message, "unexpected", unexpected);
  return absl::FailedPreconditionError(message);
}

}  // namespace flashserve::model

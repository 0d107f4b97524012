// libFuzzer target: arbitrary bytes through SafetensorsFile::FromBytes. Every accepted file's
// views are read end to end so that ASan catches any range the validation let through.
// Build and run: see README.md.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/safetensors/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using flashserve::safetensors::SafetensorsFile;
  auto file =
      SafetensorsFile::FromBytes("fuzz", std::string(reinterpret_cast<const char*>(data), size));
  if (!file.ok()) {
    // Error messages must name the file.
    if (file.status().message().find("fuzz") == std::string::npos) __builtin_trap();
    return 0;
  }
  uint64_t sum = 0;
  for (const std::string& name : (*file)->TensorNames()) {
    auto view = (*file)->Get(name);
    if (!view.ok() || view->name != name) __builtin_trap();
    if (static_cast<uint64_t>(view->numel()) * flashserve::safetensors::DTypeSize(view->dtype) !=
        view->nbytes) {
      __builtin_trap();
    }
    for (size_t i = 0; i < view->nbytes; ++i) sum += view->data[i];
  }
  for (const auto& [key, value] : (*file)->metadata()) sum += key.size() + value.size();
  volatile uint64_t sink = sum;
  (void)sink;
  return 0;
}

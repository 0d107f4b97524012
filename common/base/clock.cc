#include "common/base/clock.h"

namespace flashserve {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

}  // namespace flashserve

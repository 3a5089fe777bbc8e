// Bulk conversions between the 16-bit float types and f32, vectorised (F16C where the CPU
// has it for float16). Same rounding as the scalar conversions in dtype.h: nearest even.
#pragma once

#include <cstddef>

#include "replicator/dtype.h"

namespace replicator::detail {

void to_float(const bfloat16* in, float* out, std::size_t n);
void to_float(const float16* in, float* out, std::size_t n);
void from_float(const float* in, bfloat16* out, std::size_t n);
void from_float(const float* in, float16* out, std::size_t n);

}  // namespace replicator::detail

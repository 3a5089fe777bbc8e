// Precompiled header of every LibTorch target (see CMakeLists.txt).
#pragma once
#include <torch/torch.h>

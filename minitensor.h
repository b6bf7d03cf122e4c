// minitensor: a small C++20 tensor runtime with its own op dispatcher.
// This umbrella header brings in the whole public API.
#pragma once

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/fake.h"
#include "runtime/tensor.h"

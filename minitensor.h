// SPDX-License-Identifier: MIT
// minitensor: a small C++20 tensor runtime with its own op dispatcher.
// This umbrella header brings in the whole public API: the headers listed in
// tools/build/public_headers.txt, the only ones installed (a test checks the list).
#pragma once

#include "autograd/autocast.h"
#include "autograd/autograd.h"
#include "autograd/custom_op.h"
#include "autograd/gradcheck.h"
#include "autograd/trace.h"
#include "autograd/vmap.h"
#include "dispatcher/dispatcher.h"
#include "dispatcher/library.h"
#include "dispatcher/mode.h"
#include "kernels/compile/compile.h"
#include "kernels/jit/kernel.h"
#include "kernels/jit/pointwise.h"
#include "kernels/jit/reduction.h"
// The built-in ops (mt::add, mt::matmul, mt::softmax, ...); the unary ones (mt::exp,
// mt::gelu, ...) are declared there from the rows of kernels/elementwise_table.h, and
// `minitensor ops --namespace mt` lists every op with its schema.
#include "kernels/ops.h"
#include "kernels/ops/pointwise_op.h"
#include "runtime/cuda/cuda.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "runtime/version.h"

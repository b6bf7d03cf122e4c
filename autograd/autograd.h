// SPDX-License-Identifier: MIT
// The autograd layer in one include: tape, engine, grad mode, custom_op, gradcheck,
// opcheck and call tracing.
#pragma once

#include "autograd/custom_op.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "autograd/trace.h"

#pragma once
// Every optimizer, schedule and clipping function of kiln::optim.
#include "kiln/optim/adafactor.h"
#include "kiln/optim/adagrad.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/clip.h"
#include "kiln/optim/compiled_step.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/lion.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/rmsprop.h"
#include "kiln/optim/schedules.h"
#include "kiln/optim/sgd.h"

/* The conv layer shape the layer tests build: a 5x5 valid convolution from
 * in_c x h x w to out_c channels, then 2x2 pooling, as model_layout_init
 * lays out the cnn's conv layers (offsets left 0). */
#ifndef CTUNE_TEST_TRAINER_SHAPES_H
#define CTUNE_TEST_TRAINER_SHAPES_H

#include <stdint.h>

#include "backend.h"

static inline struct layer_shape ts_conv_shape(int in_c, int h, int w, int out_c) {
  struct layer_shape s = {0};
  s.kind = LAYER_CONV;
  s.in_c = in_c;
  s.in_h = h;
  s.in_w = w;
  s.out_c = out_c;
  s.out_h = h - MODEL_CNN_K + 1;
  s.out_w = w - MODEL_CNN_K + 1;
  s.pool_h = s.out_h / 2;
  s.pool_w = s.out_w / 2;
  s.w_size = (int64_t)out_c * in_c * MODEL_CNN_K * MODEL_CNN_K;
  s.b_size = out_c;
  return s;
}

#endif

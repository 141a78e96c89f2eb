/* Fixtures of the BlockTrain objective's tests (check_posblock,
 * check_noise): a generated text and a small model whose context moves
 * its predictions a lot. */
#ifndef TESTS_BT_FIXTURE_H
#define TESTS_BT_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/model.h"

/* len bytes (malloc'd) of five-letter groups from nine frequent letters. */
unsigned char *tu_letter_text(size_t len, uint64_t seed);
/* A CPU model of shape with GPT-2's initial weights times 3. */
kn_model *tu_scaled_model(const kn_model_shape *shape, int max_batch,
    uint64_t seed);

#endif

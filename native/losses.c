/* The sparse categorical cross-entropy of a tile of softmax outputs for the CPU tasks, in one
 * pass instead of a dozen numpy calls on a (32, 10) tile (each holding the interpreter lock the
 * other processors' tasks wait for). Per flexflow.runtime.loss's numpy reference: the picked
 * probability is clipped at FLT_MIN in double (flexflow.runtime.loss.SMALLEST_P says why), its
 * gradient -1 / (total * picked) is rounded to
 * float, the prediction is the first largest output (numpy's argmax: a NaN counts as largest). */
#include <float.h>
#include <math.h>

#include "kernels.h"

int ff_sparse_xent_f32(const float *p, const long long *labels, float *grad, long rows,
                       long classes, long valid, double total, double *loss, long *correct) {
  for (long i = 0; i < rows * classes; ++i) grad[i] = 0.0f;
  double sum = 0.0;
  long right = 0;
  for (long i = 0; i < valid; ++i) {
    long long label = labels[i];
    if (label < 0 || label >= classes) return -1;
    const float *row = p + i * classes;
    double picked = row[label];
    if (picked < FLT_MIN) picked = FLT_MIN;
    grad[i * classes + label] = (float)(-1.0 / (total * picked));
    sum += log(picked);
    long best = 0;
    if (row[0] == row[0]) /* numpy's argmax stops at the first NaN */
      for (long c = 1; c < classes; ++c) {
        if (row[c] != row[c]) {
          best = c;
          break;
        }
        if (row[c] > row[best]) best = c;
      }
    right += best == label;
  }
  *loss = -sum / total;
  *correct = right;
  return 0;
}

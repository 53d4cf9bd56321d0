/* Least squares for the ARIMA regressions: normal equations solved by
 * Cholesky. The systems are small (k <= 1 + p + q + long-AR order) and
 * well scaled; a ridge of 1e-12 of the mean diagonal only decides between
 * exactly collinear columns (a constant or linear series, where every
 * lag is the same column) and changes nothing measurable otherwise. */
#include <math.h>
#include <string.h>

#include "load/load_impl.h"
#include "util/alloc.h"

int swy_load_lstsq(const double *X, const double *y, int n, int k,
                   double *b)
{
    double *A = swy_calloc((size_t)k * k, sizeof(double));
    double *r = swy_calloc((size_t)k, sizeof(double));
    if (A == NULL || r == NULL) {
        swy_free(A);
        swy_free(r);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const double *x = X + (size_t)i * k;
        for (int a = 0; a < k; a++) {
            r[a] += x[a] * y[i];
            for (int c = 0; c <= a; c++)
                A[a * k + c] += x[a] * x[c];
        }
    }
    double trace = 0.0;
    for (int a = 0; a < k; a++)
        trace += A[a * k + a];
    double ridge = 1e-12 * (trace / k) + 1e-300;
    for (int a = 0; a < k; a++)
        A[a * k + a] += ridge;
    /* Cholesky A = L L^T in the lower triangle. */
    for (int j = 0; j < k; j++) {
        double s = A[j * k + j];
        for (int m = 0; m < j; m++)
            s -= A[j * k + m] * A[j * k + m];
        double d = sqrt(s > ridge ? s : ridge);
        A[j * k + j] = d;
        for (int i = j + 1; i < k; i++) {
            double t = A[i * k + j];
            for (int m = 0; m < j; m++)
                t -= A[i * k + m] * A[j * k + m];
            A[i * k + j] = t / d;
        }
    }
    for (int i = 0; i < k; i++) { /* L z = r */
        double t = r[i];
        for (int m = 0; m < i; m++)
            t -= A[i * k + m] * r[m];
        r[i] = t / A[i * k + i];
    }
    for (int i = k - 1; i >= 0; i--) { /* L^T b = z */
        double t = r[i];
        for (int m = i + 1; m < k; m++)
            t -= A[m * k + i] * b[m];
        b[i] = t / A[i * k + i];
    }
    swy_free(A);
    swy_free(r);
    return 0;
}
